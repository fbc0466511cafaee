"""`ddpdoctor run`: capture a profiled window on every rank of the user's unchanged command.

Only ``agent.py`` (loaded inside the ranks) touches torch, and only once the user's
program has imported it.  ``DDPDOCTOR_CAPTURE=DIR`` switches the same capture on from the job's
environment (``env_switch.py``); ``ddpdoctor.capture.window()`` lets a script mark its window
(``manual_window.py``).
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

        manual_window.claim()          # a script that marks its window gets no automatic one
        return manual_window.window
    raise AttributeError(f"module 'ddpdoctor.capture' has no attribute {name!r}")
