"""What a ticket needs beyond the diagnosis' renderings: the archive to attach (``archive.py``,
``ddpdoctor bundle``) and the before/after comparison of two diagnoses (``compare.py``,
``ddpdoctor compare``).  They read report documents and records; the pure renderers they use
live in ``ddpdoctor.report``."""
