"""Journal records of a stack's tiles (issue 30): they name their entry; one matrix's do not."""

from __future__ import annotations

from dataclasses import replace

from outofcore.journal.records import Journal, record_problem
from outofcore.planner.plan import PartialTask, Tiles
from outofcore.storage import manifest
from outofcore.storage.locations import locate


def test_a_stacks_records_name_their_entry_and_are_checked_for_it(tmp_path):
    journal = Journal.for_output(locate(tmp_path / "c.zarr"))
    flat, stacked = Tiles(4, 4, 2, 2)[1], Tiles(4, 4, 2, 2, batch=3)[9]
    assert (flat.key, stacked.key) == ("tile-0-1", "tile-0-1-b2")
    for task in (flat, stacked):
        journal.record_tile("j1", task, {"seconds": 1.0})
    assert journal.done_tiles("j1") == {"tile-0-1", "tile-0-1-b2"}
    flat_record = journal.get_json(journal.tile_key("j1", flat.key))
    record = journal.get_json(journal.tile_key("j1", stacked.key))
    assert "batch" not in flat_record and record["batch"] == 2 and record["index"] == 9
    assert record_problem(flat_record, flat) is None and record_problem(record, stacked) is None
    assert record_problem(record, replace(stacked, batch=1)) == "it is the record of another tile"
    assert record_problem(flat_record, replace(flat, batch=0)) is not None
    assert record_problem(record, replace(stacked, batch=None)) is not None
    part = PartialTask(tile=stacked, part=1, parts=2, panels=(1, 2))
    journal.record_tile("j1", stacked, {}, journal.partial_key("j1", part.key),
                        {"part": part.key, "panels": [1, 2]})  # fmt: skip
    assert journal.done_partials("j1") == {"tile-0-1-b2-k1of2"}
    assert (
        record_problem(journal.get_json(journal.partial_key("j1", part.key)), stacked, part) is None
    )
    contents = manifest.output_contents(journal.store, journal.prefix)
    assert not contents.strangers and len(contents.journal) == 3
