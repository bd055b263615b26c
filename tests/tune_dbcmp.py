# tests/tune_dbcmp.py: do tuning databases agree? winners of each against a reference run, measurements lost or duplicated
# usage: python3 tests/tune_dbcmp.py LABEL REF.db OTHER.db [PART.db ...]
#   REF: one run of the whole sweep; OTHER: the run to check (a merge of shards, or a multi-GPU run); PARTs: the
#   databases OTHER was merged from (their measurement counts must add up to OTHER's). Prints one line; a winner
#   that differs counts as "within the band" when its median is within max(band of either) of the reference's.
import sqlite3
import sys


errors = []


def q(path, sql, empty):
    """Rows of sql on the database at path; empty (and the error noted) where the file or table is missing."""
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        return con.execute(sql).fetchall()
    except Exception as e:
        errors.append(f"{path}: {e}")
        return empty


def winners(path):
    return {(f, s): (v, m, b) for f, s, v, m, b in
            q(path, "SELECT family, shape_key, variant_key, median_ms, band FROM winners", [])}


def count(path, sql):
    return q(path, sql, [(0,)])[0][0]


label, ref, other, parts = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
wr, wo = winners(ref), winners(other)
same = sum(1 for k in wr if k in wo and wo[k][0] == wr[k][0])
near = 0
for k in wr:
    if k in wo and wo[k][0] != wr[k][0] and wr[k][1] and wo[k][1]:
        band = max(wr[k][2] or 0.01, wo[k][2] or 0.01)
        near += abs(wo[k][1] / wr[k][1] - 1) <= band
dup = count(other, "SELECT count(*) FROM (SELECT variant_key, shape_key, run_id, count(*) c FROM measurements "
                   "GROUP BY 1, 2, 3 HAVING c > 1)")
mo = count(other, "SELECT count(*) FROM measurements")
mp = sum(count(p, "SELECT count(*) FROM measurements") for p in parts) if parts else None
print(f"{label}: winners {len(wo)} against {len(wr)} in one run; shapes missing {len(set(wr) - set(wo))}; same winner "
      f"{same}/{len(wr)}, another within the band {near}; measurements {mo}"
      + (f" (the parts: {mp})" if mp is not None else "") + f"; duplicated measurement groups {dup}" + (f"; errors: {'; '.join(errors)}" if errors else ""))
