"""Renderers: the figures, terminal tables and summaries drawn from one result (a plan, a
decode table, a trace, a scaling run). Below the API, whose results draw themselves with
them, and above the layers whose results they draw; the report page lays them out."""
