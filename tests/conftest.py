import os
import sys

# Tests import their helpers (model_utils, cli_utils) as top-level modules.
sys.path.insert(0, os.path.dirname(__file__))
