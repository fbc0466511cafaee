"""The capture agent: everything that runs inside the user's training ranks.

The folder is loaded by path, as the package ``ddpdoctor_capture_agent``, into the user's own interpreter
(``sitecustomize.py`` under ``ddpdoctor run``, which copies the whole folder into the run's private
folder; ``capture/env_switch.py`` under ``DDPDOCTOR_CAPTURE``).  So its modules import only the standard
library and each other, relatively, and torch only once the user's program has imported it.  ddpdoctor's
own process imports the same modules as ``ddpdoctor.capture.agent.*`` (the launcher's ``run --try``
parsing, the hang signaller, the tests).  ``core.py`` connects the parts; ``contract.py`` declares what
they write.
"""

PACKAGE = "ddpdoctor_capture_agent"  # the name the folder is loaded under inside a rank
CORE = PACKAGE + ".core"  # its module holding ``AGENT`` and ``maybe_activate``
