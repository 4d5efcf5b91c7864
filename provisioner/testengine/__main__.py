"""``python -m provisioner.testengine``: run the obleth test engine (not a model)."""

from provisioner.testengine.server import main

raise SystemExit(main())
