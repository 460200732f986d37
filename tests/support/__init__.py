"""Helpers of the tests (not tests): imported as `from support.<module> import ...`;
tests/ is on sys.path through tests/conftest.py. Some also run as programs or as
another user (isolation_attacker.py): their paths are named where they are started."""
