"""Build hook (hatchling): installs ``ddpdoctor_capture.pth`` at the top of site-packages (wheel and
editable installs: the ``DDPDOCTOR_CAPTURE`` switch, ddpdoctor/capture/env_switch.py), and compiles ddpdoctor/trace/_kscan.c, the trace column reader, into
ddpdoctor/trace/_kscan.so with the system C compiler (``$CC``, default ``cc``) on every wheel or
editable build. It is a plain C library loaded with ctypes (no Python headers needed). If no
compiler is found the build goes on without it and ddpdoctor decodes with msgspec only (slower,
same results)."""

from __future__ import annotations

import hashlib
import os
import shlex
import subprocess
from pathlib import Path

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


PTH_NAME = "ddpdoctor_capture.pth"


class KScanBuildHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict) -> None:
        self._capture_pth(version, build_data)
        self._kscan(version, build_data)

    def _capture_pth(self, version: str, build_data: dict) -> None:
        """The one-line .pth of the DDPDOCTOR_CAPTURE switch, at the wheel's root (site-packages).  An
        editable wheel takes ``force_include_editable`` instead of the configured force-include when it is
        set, so that map gets the configured entries too."""
        pth = str(Path(self.root) / "ddpdoctor" / "capture" / PTH_NAME)
        if version == "editable":
            forced = build_data.setdefault("force_include_editable", {})
            if not forced:
                forced.update(self.build_config.force_include)
            forced[pth] = PTH_NAME
        else:
            build_data["force_include"][pth] = PTH_NAME

    def _kscan(self, version: str, build_data: dict) -> None:
        src = Path(self.root) / "ddpdoctor" / "trace" / "_kscan.c"
        out = src.with_name("_kscan.so")
        source_id = source_hash(src.parent)
        cmd = [*shlex.split(os.environ.get("CC", "cc")), "-O2", "-shared", "-fPIC", "-pthread",
               f'-DKS_SOURCE_ID="{source_id}"', "-o", str(out), str(src)]
        try:
            subprocess.run(cmd, check=True, capture_output=True, text=True)
        except (OSError, subprocess.CalledProcessError) as exc:
            detail = getattr(exc, "stderr", None) or exc
            self.app.display_warning(f"ddpdoctor: the C trace reader was not built ({' '.join(cmd)}: {detail}); "
                                     "traces are decoded with msgspec only (same results, slower)")
            return
        build_data["pure_python"] = False
        build_data["infer_tag"] = True
        if version != "editable":
            build_data["force_include"][str(out)] = "ddpdoctor/trace/_kscan.so"


def source_hash(folder: Path) -> str:
    """The same hash as ddpdoctor.trace.fastscan.source_hash (kept apart: the build cannot import
    the package)."""
    h = hashlib.sha256()
    for name in ("_kscan.c", "_kscan_lex.h"):
        h.update((folder / name).read_bytes())
    return h.hexdigest()[:16]
