"""`ddpdoctor run`: capture a profiled window on every rank of the user's unchanged command.

Only ``agent.py`` (loaded inside the ranks) touches torch, and only once the user's
program has imported it.
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
