"""`ddpdoctor run --try KEY=VALUE`: the same job with and without one change, measured (trial.json)."""
