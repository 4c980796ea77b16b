"""notebooks/ is a package only so that its conftest.py (the learner's-screen checks nbval runs) is
imported as notebooks.conftest, not as a second top-level `conftest` beside tests/conftest.py."""
