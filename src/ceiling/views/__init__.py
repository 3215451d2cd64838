"""How any result shows itself: its JSON record as notebook tables and data frames
(`notebook`, `tables`) and a matplotlib figure drawn without pyplot (`figure`). Imports only
the leaves, so every layer's results can use it."""
