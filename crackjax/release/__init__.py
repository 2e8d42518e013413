"""Making and judging a released model, the layer above the core (the core never imports it):
`candidates` (every trained model kept in the repository the day it is made, and the warm start
of a run whose machine is gone)."""
