"""The round trace against pcoll_imbalance's own schedule (tests/multiprocess/trace_report.sh):
in a `paper` run the ranks drawn in a round (given extra compute) post later after that
round's initiator than the others, and are late in it. Round by round the dynamics blur this
(a rank drawn in round t is often still late in t + 1, and solo marks undrawn ranks late
too), so the rules are over all rounds: drawn (rank, round) cells post later on average than
undrawn ones, and most drawn cells are late.
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
mean = lambda values: sum(values) / len(values)
summary = (f"drawn: {len(drawn_delays)} cells, mean {mean(drawn_delays):.2f} ms after the initiator, "
           f"{100 * mean(drawn_late):.0f}% late; undrawn: {len(undrawn_delays)} cells, mean {mean(undrawn_delays):.2f} ms")
print("trace_paper_check.py: " + summary)
if not (mean(drawn_delays) > mean(undrawn_delays) and mean(drawn_late) >= 0.6):
    sys.exit("trace_paper_check.py: the drawn ranks do not stand out as the late ones")
