"""The functions `import ceiling` exposes, one module per capability; each returns a typed
result (`ceiling.api.result.Result`) that the command line prints and `--json` serialises."""
