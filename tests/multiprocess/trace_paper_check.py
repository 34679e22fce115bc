"""The round trace against pcoll_imbalance's own schedule (tests/multiprocess/trace_report.sh):
in a `paper` run the ranks drawn in a round (given extra compute) post later after that
round's initiator than the others, and are late in it. Solo marks undrawn ranks late too, so
the round-by-round rule is on post times, not on late flags: in at least half of the rounds
that have both kinds, every drawn rank posted later than every undrawn one (about 80% of the
rounds on an idle 2-core host; a trace that mixed up its ranks or rounds lands near chance,
17-25%). Over all rounds: drawn cells post later on average than undrawn ones, and most
drawn cells are late.
Usage: trace_paper_check.py REPORT_JSON SCHEDULE_CSV"""
import csv
import json
import sys

report = [h for h in json.load(open(sys.argv[1])) if h["mode"] == "solo"][0]
schedule = {(int(r["step"]), int(r["rank"])): float(r["compute_ms"]) for r in csv.DictReader(open(sys.argv[2]))}
P = report["ranks"]
drawn_delays, undrawn_delays, drawn_late = [], [], []
for j, t in enumerate(report["round_numbers"]):
    base = min(schedule[(t, r)] for r in range(P))
    for r in range(P):
        delay = report["post_after_initiator_ms"][r][j]
        if delay is None:
            continue
        if schedule[(t, r)] > base:
            drawn_delays.append(delay)
            drawn_late.append(bool(report["late"][r][j]))
        else:
            undrawn_delays.append(delay)
rounds_compared = rounds_ordered = 0
for j, t in enumerate(report["round_numbers"]):
    base = min(schedule[(t, r)] for r in range(P))
    delays = [report["post_after_initiator_ms"][r][j] for r in range(P)]
    drawn = [delays[r] for r in range(P) if schedule[(t, r)] > base and delays[r] is not None]
    undrawn = [delays[r] for r in range(P) if schedule[(t, r)] == base and delays[r] is not None]
    if drawn and undrawn:
        rounds_compared += 1
        rounds_ordered += min(drawn) > max(undrawn)
mean = lambda values: sum(values) / len(values)
summary = (f"drawn: {len(drawn_delays)} cells, mean {mean(drawn_delays):.2f} ms after the initiator, "
           f"{100 * mean(drawn_late):.0f}% late; undrawn: {len(undrawn_delays)} cells, mean {mean(undrawn_delays):.2f} ms")
summary += f"; rounds where every drawn rank posted after every undrawn one: {rounds_ordered} of {rounds_compared}"
print("trace_paper_check.py: " + summary)
if rounds_compared == 0 or rounds_ordered < 0.5 * rounds_compared:
    sys.exit("trace_paper_check.py: round by round, the drawn ranks do not post last")
if not (mean(drawn_delays) > mean(undrawn_delays) and mean(drawn_late) >= 0.6):
    sys.exit("trace_paper_check.py: the drawn ranks do not stand out as the late ones")
