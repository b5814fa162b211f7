"""hf427.py: imports transformers 4.27.1's BridgeTower for the scripts that check bt against it
(verify_hf_checkpoint.py, verify_hf_fixtures.py). transformers is not installable on the build
machines: scripts/make_hf_shim.py builds a minimal import shim from the 4.27.1 source files,
outside the repo, and its directory (default /tmp/hf_bt/shim) goes on PYTHONPATH.

    hf                 transformers.models.bridgetower.modeling_bridgetower
    BridgeTowerConfig  its configuration class
    hf_bcast           the shim's copy of the modeling file whose ForContrastiveLearning adds the
                       image token-type row by broadcasting, or None when the shim has none.
                       4.27.1's ITC forward adds it with expand_as to the Hv-wide ln_post output,
                       which runs only when Hv == H (true for every published checkpoint, not for
                       the tiny fixture: Hv 64, H 32); the copy differs in that one line and is
                       used only to run the ITC forward, never to load.

Exits with a message naming the calling script when transformers' BridgeTower cannot be
imported."""

import os
import sys

try:
    from transformers.models.bridgetower import modeling_bridgetower as hf  # noqa: F401
    from transformers.models.bridgetower.configuration_bridgetower import BridgeTowerConfig  # noqa: F401
except ImportError as e:
    sys.exit("%s: cannot import transformers' BridgeTower (%s); build the shim with "
             "scripts/make_hf_shim.py GIT_DIR and put its directory (default /tmp/hf_bt/shim) on PYTHONPATH"
             % (os.path.basename(sys.argv[0]), e))
try:
    from transformers.models.bridgetower import modeling_bridgetower_bcast as hf_bcast  # noqa: F401
except ImportError:
    hf_bcast = None
