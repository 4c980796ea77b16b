"""The core: knows no lab. Every module here imports only other core modules (tests/test_layering.py)."""
