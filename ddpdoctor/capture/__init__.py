"""`ddpdoctor run`: capture a profiled window on every rank of the user's unchanged command.

Only ``agent.py`` (loaded inside the ranks) touches torch, and only once the user's
program has imported it.  ``DDPDOCTOR_CAPTURE=DIR`` switches the same capture on from the job's
environment (``env_switch.py``); ``ddpdoctor.capture.window()`` lets a script mark its window
(``manual_window.py``).
"""


def __getattr__(name):
    if name == "window":
        from . import manual_window

        manual_window.claim()          # a script that marks its window gets no automatic one
        return manual_window.window
    raise AttributeError(f"module 'ddpdoctor.capture' has no attribute {name!r}")
