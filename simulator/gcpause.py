"""Pause Python's cyclic garbage collector while a large structure is built.

Building a big topology, its cluster index and its trace allocates millions of dicts,
tuples and ops that are not garbage, let alone garbage in cycles; meanwhile the collector
walks the growing heap again and again (full passes over millions of objects).
Reference counting frees
everything as usual while paused; the collector resumes on leaving the outermost pause.

On leaving it, whatever the block built is filed with the old objects (``gc.freeze`` then
``gc.unfreeze`` moves every tracked object to the oldest generation without walking one)
rather than left in the youngest: otherwise the first young collection afterwards walks
all of it (millions of objects) and then walks it again when
it is promoted. Nothing is kept alive by this: the oldest generation is still collected,
on the collector's usual schedule.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def gc_paused() -> Iterator[None]:
    """Run the block with the cyclic collector off; on again afterwards if it was on."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.freeze()        # file the young objects with the old ones ...
            gc.unfreeze()      # ... (both are list splices: no object is visited)
            gc.enable()
