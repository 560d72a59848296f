"""Root conftest: deliberately empty.

pytest loads this file for every run in the repository, the README's main
job included, so it imports nothing: the project's own test fixtures live in
``tests/conftest.py``.
"""
