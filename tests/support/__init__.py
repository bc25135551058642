"""Helpers shared by the test modules (importable as ``support.*``: ``pytest.ini`` puts
``tests/`` on ``sys.path``). Test modules import helpers from here, never from each other."""
