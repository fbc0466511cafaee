"""``python -m ddpdoctor_synth SCENARIO.toml OUT_DIR [--gzip/--no-gzip] [--target-mb N]``."""

from . import main

if __name__ == "__main__":  # guarded: --jobs workers (spawn) import this module again
    raise SystemExit(main())
