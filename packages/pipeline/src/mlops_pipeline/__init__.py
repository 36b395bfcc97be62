"""The whole loop on one machine, as `mlops pipeline run` and `make demo` run it."""
