import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

REAL = Path(__file__).resolve().parents[1].parent / "shared" / "real_traces"


@pytest.fixture(scope="session")
def real_traces() -> Path:
    root = Path(os.environ.get("DDPDOCTOR_REAL_TRACES", REAL))
    if not root.is_dir():
        pytest.skip(
            f"real traces not found at {root} (the shared/ folder sits beside the project in "
            f"development and CI; set DDPDOCTOR_REAL_TRACES to point elsewhere)"
        )
    return root


@pytest.fixture(autouse=True)
def _no_secrets_carried_over():
    """Secret values remembered by one analysis (redact.collect_secrets, collect_log_secrets) are process-wide:
    forget them after each test so one test's logs cannot hide text in another's."""
    yield
    from ddpdoctor.redact import forget_secrets

    forget_secrets()
