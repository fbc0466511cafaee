"""Capture: a profiled window on every rank of the user's unchanged command.

- ``agent/``: everything that runs inside the user's ranks, loaded there as a folder by path (standard
  library only; torch only once the user's program has imported it); ``agent/contract.py`` declares
  what a rank writes (``settings.json`` fields, event kinds) for the agent and for the analysis;
- ``host/``: ddpdoctor's own side (the launcher of ``ddpdoctor run``, host facts, the manifest, and the
  records written in the launcher's place under ``DDPDOCTOR_CAPTURE``);
- here: the public entry points of a user's process, ``env_switch.py`` (``DDPDOCTOR_CAPTURE=DIR``, run by
  the ``ddpdoctor_capture.pth`` line at every Python start) and ``ddpdoctor.capture.window()``
  (``manual_window.py``: the script marks its window).

The `run` command itself is ddpdoctor/cli_run.py; capture imports neither the analysis nor the CLI.
"""

# What a bundle holds, as a number written into its manifest ("capture_version"). Bump it when `ddpdoctor
# run` starts recording something that `analyze` reads; the bundled samples (sample_traces/capture_*) must
# then be re-recorded, and tests/test_samples.py fails until they are. A manifest without the key is 1.
CAPTURE_VERSIONS = {
    1: "traces, settings.json, events.jsonl, host facts",
    2: "window evidence: the Python stack sampler (file:line of a rank's extra time), host contention, "
    "batch fingerprints, the CPU time of DataLoader workers",
}
CAPTURE_VERSION = max(CAPTURE_VERSIONS)


def __getattr__(name):
    if name == "window":
        from . import manual_window

        manual_window.claim()  # a script that marks its window gets no automatic one
        return manual_window.window
    raise AttributeError(f"module 'ddpdoctor.capture' has no attribute {name!r}")
