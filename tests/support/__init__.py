"""Helpers shared by the test modules, imported as ``tests.support.*``. Test modules import
helpers from here, never from each other."""
