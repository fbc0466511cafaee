"""Build hook (hatchling).

* Installs ``ddpdoctor_capture.pth`` at the top of site-packages (wheel and editable installs: the
  ``DDPDOCTOR_CAPTURE`` switch, see the capture package).
* Compiles ddpdoctor/trace/_kscan.c, the trace column reader, with the system C compiler (``$CC``,
  default ``cc``). It is a plain C library loaded with ctypes: no Python headers and no CPython ABI,
  so the wheel is tagged ``py3-none-<platform>``. The library is compiled into a temporary folder,
  never into the checkout: a wheel carries it as ``ddpdoctor/trace/_kscan.so``, an editable install
  as ``ddpdoctor_native/_kscan.so`` in site-packages (ddpdoctor/trace/fastscan.py looks in both).
* Without a compiler the build goes on with a warning, and ddpdoctor decodes traces with msgspec
  only (same results, slower); ``ddpdoctor analyze -v`` and the analysis JSON say which decoder ran.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

PTH_NAME = "ddpdoctor_capture.pth"
LIB_IN_WHEEL = "ddpdoctor/trace/_kscan.so"
LIB_IN_EDITABLE = "ddpdoctor_native/_kscan.so"


class KScanBuildHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict) -> None:
        self._tmp = tempfile.mkdtemp(prefix="ddpdoctor-build-")
        self._capture_pth(version, build_data)
        self._kscan(version, build_data)

    def finalize(self, version: str, build_data: dict, artifact_path: str) -> None:
        shutil.rmtree(self._tmp, ignore_errors=True)

    def _forced(self, version: str, build_data: dict) -> dict:
        """The force-include map of this build. An editable wheel takes ``force_include_editable``
        instead of the configured force-include when it is set, so that map gets the configured
        entries too."""
        if version != "editable":
            return build_data["force_include"]
        forced = build_data.setdefault("force_include_editable", {})
        if not forced:
            forced.update(self.build_config.force_include)
        return forced

    def _capture_pth(self, version: str, build_data: dict) -> None:
        pth = str(Path(self.root) / "ddpdoctor" / "capture" / PTH_NAME)
        self._forced(version, build_data)[pth] = PTH_NAME

    def _kscan(self, version: str, build_data: dict) -> None:
        src = Path(self.root) / "ddpdoctor" / "trace" / "_kscan.c"
        out = Path(self._tmp) / "_kscan.so"
        cmd = [
            *shlex.split(os.environ.get("CC", "cc")),
            "-O2",
            "-shared",
            "-fPIC",
            "-pthread",
            f'-DKS_SOURCE_ID="{source_hash(src.parent)}"',
            "-o",
            str(out),
            str(src),
        ]
        try:
            subprocess.run(cmd, check=True, capture_output=True, text=True)
        except (OSError, subprocess.CalledProcessError) as exc:
            detail = (getattr(exc, "stderr", None) or str(exc)).strip()
            message = (
                f"ddpdoctor: the C trace reader was not built ({' '.join(cmd)}: {detail}); traces will be "
                "decoded with msgspec only (same results, slower). Install a C compiler (or set CC) "
                "and reinstall to build it."
            )
            self.app.display_warning(message)
            print(f"WARNING: {message}", file=sys.stderr)  # pip shows the backend's stderr with -v
            return
        self._forced(version, build_data)[str(out)] = LIB_IN_EDITABLE if version == "editable" else LIB_IN_WHEEL
        if version != "editable":
            build_data["pure_python"] = False
            build_data["tag"] = f"py3-none-{platform_tag()}"


def platform_tag() -> str:
    """The platform part of a wheel tag for this machine (``linux_x86_64``, ``macosx_11_0_arm64``)."""
    return sysconfig.get_platform().replace("-", "_").replace(".", "_")


def source_hash(folder: Path) -> str:
    """The same hash as ddpdoctor.trace.fastscan.source_hash (kept apart: the build cannot import
    the package)."""
    h = hashlib.sha256()
    for name in ("_kscan.c", "_kscan_lex.h"):
        h.update((folder / name).read_bytes())
    return h.hexdigest()[:16]
