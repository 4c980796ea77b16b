"""Lab 07's and lab 08's sentences name what the record ran: a row whose recorded code has moved on since
(store.mark_stale's `note` column, kept by a device record's `stale_kept` or waiting for `make bench`) is said
to be of an earlier version wherever a sentence or a side-by-side table reads it."""
from __future__ import annotations

from ..core import results


def stale_names(d) -> list:
    """The row names of d's first device whose recorded code has moved on since (store.mark_stale's `note`
    column: 'recorded with an earlier version of step NN'), in the frame's order; [] when none."""
    part = results.one_source(d) if d is not None and len(d) else None
    if part is None or "note" not in part or "name" not in part:
        return []
    old = part.loc[part["note"].fillna("").astype(str) != "", "name"].astype(str)
    return list(dict.fromkeys(old))


def stale_said(d, text: str, names=()) -> str:
    """text, and where it reads a row of d's device that ran an earlier version of the code (a step it names
    in backticks, or one of `names`), a sentence saying so: what the record ran, not today's step."""
    old = [n for n in stale_names(d) if n in names or f"`{n}`" in text]
    if not old:
        return text
    from ..core import store
    dev = results.one_source(d)["device"].iloc[0]
    them = "that row" if len(old) == 1 else "those rows"
    why = (f"the record keeps {them} for the reason its `meta.json` gives (the STALE line above)"
           if store.kept_reason(store.slug(dev)) else f"`make bench` on that GPU re-records {them}")
    return (text + f" *(On the {dev} record, {', '.join(f'`{n}`' for n in old)} ran an earlier version of "
            f"{'its' if len(old) == 1 else 'their'} code than today's: {why}.)*")


def each_device(df, sentence, *others, names=(), then: str = "") -> None:
    """results.each_device, each sentence with stale_said: a sentence that reads rows recorded with an earlier
    version of a step says so."""
    results.each_device(df, lambda d, *o: stale_said(d, sentence(d, *o), names), *others, then=then)


def stale_line(df) -> str:
    """One line per recorded device whose rows in df ran an earlier version of a step (for a table that sets
    every device side by side: the targets, other_gpus): how many rows, of which steps; '' when none."""
    said = []
    for p in results.devices(df):
        old = stale_names(p) if p is not None and len(p) else []
        if old:
            rows = int((p["note"].fillna("").astype(str) != "").sum())
            said.append(f"On the {p['device'].iloc[0]} record, {rows} row{'s' if rows != 1 else ''} of this section ran "
                        f"an earlier version of the code (of {', '.join(f'`{n}`' for n in old[:6])}"
                        f"{' ...' if len(old) > 6 else ''}): its column reads what that code measured.")
    return " ".join(said)


def other_gpus(df, **kw):
    """results.device_table (every record side by side), after a line naming the records whose rows in df ran an
    earlier version of a step (stale_line): a column read from such rows says so."""
    if stale_line(df):
        results.say(stale_line(df))
    return results.device_table(df, **kw)
