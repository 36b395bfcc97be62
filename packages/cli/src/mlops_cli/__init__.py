"""The ``mlops`` command line."""
