"""Other libraries' log lines and warnings kept off the user's stderr (dask logs every
worker it starts and every connection it loses); `-v` lets them through."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def quiet_libraries(*names: str, verbose: bool = False) -> Iterator[None]:
    """While inside: the loggers `names` say nothing below CRITICAL, and warnings raised from
    their modules are not shown. `verbose` leaves both as they are."""
    if verbose:
        yield
        return
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    with warnings.catch_warnings():
        for name in names:
            warnings.filterwarnings("ignore", module=rf"{name}(\..*)?$")
        for logger in loggers:
            logger.setLevel(logging.CRITICAL)
        try:
            yield
        finally:
            for logger, level in zip(loggers, levels, strict=True):
                logger.setLevel(level)
