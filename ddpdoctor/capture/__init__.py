"""`ddpdoctor run`: capture a profiled window on every rank of the user's unchanged command.

Only ``agent.py`` (loaded inside the ranks) touches torch, and only once the user's
program has imported it.
"""
