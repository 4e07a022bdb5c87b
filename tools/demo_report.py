"""The demo's outcome: every check run against the store (tools/demo_checks.py) and the summary
printed (the per-device table, health records, netem's counts, the checks, the result line)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from leadwire.bridge.store_reader import StoreReader
from leadwire.tools import testbed
from leadwire.tools.demo_checks import (
    Device,
    Facts,
    check_auth,
    check_boards,
    check_netem,
    check_sims,
    check_spark,
    read_facts,
)
from leadwire.tools.testbed import netem_totals

if TYPE_CHECKING:
    from leadwire.tools.demo_scenario import Demo


HEAD = ("device", "link", "events", "lead=1", "=0", ">1", "<0", "lost", "unknown", "restarts", "truth")


def table_rows(devices: list[Device], facts: dict[str, Facts]) -> list[list[str]]:
    out = []
    for d in devices:
        f = facts.get(d.id) or Facts(d.id, d.transport)
        out.append(
            [
                d.id,
                "%s %s" % (d.kind, d.transport),
                str(f.events),
                *map(str, f.lead),
                str(f.lost_exact),
                str(f.lost_unknown),
                str(max(0, len(f.boots) - 1)),
                f.truth if f.truth_ok else "FAIL " + f.truth,
            ]
        )
    return out


def format_table(rows: list[list[str]]) -> str:
    return testbed.format_table([list(HEAD), *rows], left=2, free_last=True)


def group_row(name: str, devs: list[Device], facts: dict[str, Facts]) -> list[str]:
    fs = [facts[d.id] for d in devs if d.id in facts]
    ok = sum(f.truth_ok for f in fs)
    gen = sum(d.group.limit for d in devs if d.group)
    before = sum(f.before_contact or 0 for f in fs)
    return [
        "%s x%d" % (name, len(devs)),
        "sim udp",
        str(sum(f.events for f in fs)),
        *(str(sum(f.lead[i] for f in fs)) for i in range(4)),
        str(sum(f.lost_exact for f in fs)),
        str(sum(f.lost_unknown for f in fs)),
        str(sum(max(0, len(f.boots) - 1) for f in fs)),
        "%d/%d ok: %d generated, %d before contact" % (ok, len(fs), gen, before),
    ]


def run_checks(demo: Demo, spark: bool | None) -> int:
    """Every check into demo.outcome.checks, then the summary on demo.stdout; the exit status."""
    self = demo
    with StoreReader(self.db) as r:
        facts = read_facts(r)
        return _checks(self, r, facts, spark)


def _checks(self: Demo, r: StoreReader, facts: dict[str, Facts], spark: bool | None) -> int:
    sims = [d for d in self.devices if d.kind == "sim"]
    boards = [d for d in self.devices if d.kind == "board"]
    checks = self.outcome.checks
    if sims:
        ok, msg = check_sims(r, sims, facts)
        checks.append(("simulator ground truth", ok, msg))
        want = sum(d.group.limit for d in sims if d.group)
        checks.append(
            (
                "simulators' own count",
                self.sim_generated == want,
                "the simulators report %s events generated; %d planned" % (self.sim_generated, want),
            )
        )
    if boards:
        ok, msgs = check_boards(r, boards, facts, self.restarted)
        checks.append(
            (
                "board ground truth",
                ok,
                "boards: %d/%d consistent with their own sample numbers and boot counters"
                % (sum(facts[d.id].truth_ok for d in boards if d.id in facts), len(boards)),
            )
        )
        if self.restarted:
            f = facts.get(self.restarted)
            det = f.boots[1][2] if f and len(f.boots) == 2 else "not"
            ok_r = bool(f and len(f.boots) == 2 and f.restart_rows == 1)
            checks.append(
                (
                    "restart detected",
                    ok_r,
                    "the restart of %s was detected (%s; boot counter %s); no other device restarted"
                    % (
                        self.restarted,
                        "by " + det if ok_r else "NOT detected",
                        " -> ".join(str(b[1]) for b in f.boots) if f else "?",
                    ),
                )
            )
    snaps = self.bed.netem.snapshots()
    ok, msg = check_netem(facts, snaps)
    checks.append(("netem vs bridge", ok, msg))
    checks.append(("authentication", *check_auth(self.devices, facts)))
    stored_arrivals = sum(f.arrivals for f in facts.values())
    ec = self.outcome.export_counts
    checks.append(
        (
            "export",
            ec.get("arrivals") == stored_arrivals,
            "export wrote %d arrival rows; the store has %d" % (ec.get("arrivals", 0), stored_arrivals),
        )
    )
    if spark:
        ok, msgs = check_spark(self.out / "report", facts)
        checks.append(("spark vs store", ok, "; ".join(msgs)))
    else:
        checks.append(("spark vs store", None, "skipped: the Spark job did not run"))
    print_summary(self, facts, snaps, spark)
    return 0 if all(ok is not False for _, ok, _ in checks) else 1


def print_summary(
    self: Demo, facts: dict[str, Facts], snaps: list[tuple[str, str, dict[str, Any]]], spark: bool | None
) -> None:
    """The summary table (boards, simulator groups, the worst simulated devices, the fleet), the
    boards' health, netem's counts and the checks; every device in OUT/summary.txt."""
    o = self.opts
    boards = [d for d in self.devices if d.kind == "board"]
    sims = [d for d in self.devices if d.kind == "sim"]
    full = table_rows(self.devices, facts)
    (self.out / "summary.txt").write_text(format_table(full) + "\n")
    rows = table_rows(boards, facts)
    groups: dict[str, list[Device]] = {}
    for d in sims:
        assert d.group is not None
        groups.setdefault(d.group.name, []).append(d)
    rows += [group_row("sim " + name, devs, facts) for name, devs in groups.items()]
    worst = sorted(sims, key=lambda d: (-(facts[d.id].lost_exact if d.id in facts else 0), d.index))
    worst = [d for d in worst if d.id in facts and facts[d.id].lost_exact][:5]
    rows += table_rows(worst, facts)
    fs = list(facts.values())
    rows.append(
        [
            "fleet (%d devices)" % len(fs),
            "",
            str(sum(f.events for f in fs)),
            *(str(sum(f.lead[i] for f in fs)) for i in range(4)),
            str(sum(f.lost_exact for f in fs)),
            str(sum(f.lost_unknown for f in fs)),
            str(sum(max(0, len(f.boots) - 1) for f in fs)),
            "%d duplicate and late arrivals stored as such" % sum(f.arrivals - f.events for f in fs),
        ]
    )
    w = self.stdout.write
    w(
        "\nleadwire demo: %d boards (%d udp, %d serial), %d simulated devices, %g s, seed %d\n\n"
        % (
            len(boards),
            sum(d.transport == "udp" for d in boards),
            sum(d.transport == "serial" for d in boards),
            len(sims),
            o.seconds,
            o.seed,
        )
    )
    w(format_table(rows) + "\n")
    w(
        "  lead = seq - highest seq so far (spec 000): 1 in order, 0 or <0 a duplicate or late "
        "answer, >1 after a gap;\n"
        "  lost = events lost in ring overruns, counted exactly; unknown = recoveries of unknown size "
        "(first contact, restart);\n"
        "  every device: %s\n" % (self.out / "summary.txt")
    )
    for d in boards:
        f = facts.get(d.id)
        if f is not None and f.health:
            h = f.health
            w(
                "  %s last health record: boot %s, up %s s, heap free %s B (low %s), ring overruns %s, "
                "bad frames received %s\n"
                % (
                    d.id,
                    h.get("boots"),
                    h.get("uptime_s"),
                    h.get("heap_free"),
                    h.get("heap_min"),
                    h.get("overruns"),
                    h.get("bad_frames"),
                )
            )
    w("\nnetem injected (seeded):\n" + netem_lines(snaps))
    w("\nchecks:\n")
    for name, ok, text in self.outcome.checks:
        w("  %s %s: %s\n" % ({True: "PASS", False: "FAIL", None: "SKIP"}[ok], name, text))
    if spark:
        w("\nreport: %s\n" % (self.out / "report" / "index.html"))
    failed = [n for n, ok, _ in self.outcome.checks if ok is False]
    w(
        "result: %s (%.0f s)\n"
        % (
            "FAILED: " + ", ".join(failed)
            if failed
            else "OK - every event stored once or counted lost, every count cross-checked",
            self.say.elapsed(),
        )
    )
    self.stdout.flush()


def netem_lines(snaps: list[tuple[str, str, dict[str, Any]]]) -> str:
    """What netem did, per link kind and direction (seeded: the same run, the same counts)."""
    out = []
    for key, t in sorted(netem_totals(snaps).items()):
        g = t.get
        if key.startswith("udp"):
            out.append("  %-11s %7d datagrams: lost %d, duplicated %d, held %d (%d overtaken), corrupted %d\n"
                       % (key.replace("_", " "), g("in", 0), g("lost", 0), g("duplicated", 0), g("held", 0),
                          g("reordered", 0), g("corrupted_out", 0)))  # fmt: skip
        else:
            out.append("  %-11s %7d bytes: %d loss runs (%d bytes), %d frames duplicated, %d held back\n"
                       % (key.replace("_", " "), g("in_bytes", 0), g("loss_runs", 0), g("lost_bytes", 0),
                          g("duplicated", 0), g("held", 0)))  # fmt: skip
    return "".join(out)
