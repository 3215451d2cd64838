"""Serving: a continuous-batching scheduler simulated over requests, each iteration timed by
the same roofline terms as the expected decode step."""
