"""compare_runs: before/after benchmark comparison with significance and comparability checks.

`load` reads result files (ours and `vllm bench serve --save-result`), `stats` holds the bootstrap and
the verdict rule, `checks` decides whether two runs measured the same thing, `capacity` compares
capacity searches, `server_diff` explains a change from the /metrics window, `models` holds the input
and output models, `api` ties them together and `render` prints the CLI table.
"""

from __future__ import annotations
