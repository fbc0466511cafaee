"""``python -m ddpdoctor.synth SCENARIO.toml OUT_DIR [--gzip/--no-gzip] [--target-mb N]``."""

from . import main

raise SystemExit(main())
