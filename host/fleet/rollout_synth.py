"""A synthetic firmware rollout on top of :mod:`leadwire.fleet.synth`: releases come out on given
days, devices take the newest one at a reboot, and one release can be made worse on purpose.

The fleet itself (streams, faults, restarts, overruns) is synth's; this module only rewrites
``firmware_version`` per boot (a device changes firmware only when it boots, as a real upgrade
does) and, for the release made worse, drops some arrivals (gaps never filled: more loss) and
stretches latency. The stored ``lead`` of every domain that lost rows is recomputed the way the
bridge computes it, so the export stays consistent (no lead mismatches).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa

from .schema import TABLES
from .synth import DAY_US, SynthConfig, bridge_lead, generate, write_export

LEAD_DOMAIN = ["device_id", "boot_epoch", "kind", "session", "lead_channel"]


@dataclass
class RolloutConfig:
    # (version, day it comes out, counted from SynthConfig.start), in release order
    releases: tuple[tuple[str, float], ...] = (("1.0.0", 0.0), ("1.1.0", 2.0), ("1.2.0", 4.0))
    adoption: float = 0.85  # chance that a device takes a release at its first boot after it is out
    worse: str | None = None  # the release made worse on purpose (None: nothing changes)
    extra_loss: float = 0.0  # share of its single-copy arrivals (not a domain's first or last) dropped
    latency_factor: float = 1.0  # its commit and end-to-end latencies multiplied by this


def rollout_synth_config(**kw: object) -> SynthConfig:
    """synth's defaults for a rollout: every device reboots (restart_share 1.0) over six days, and
    overruns are rare and small so that a release's loss is not drowned by a few devices' overruns."""
    base = SynthConfig(rows=60_000, devices=40, days=6.0, restart_share=1.0, overruns_per_boot=0.15)
    return dataclasses.replace(base, overrun_max=10, **kw)  # type: ignore[arg-type]


def _boot_firmware(boots: pd.DataFrame, cfg: SynthConfig, rc: RolloutConfig) -> dict[tuple[str, int], str]:
    """(device_id, boot_epoch) -> the release that boot ran: the first boot the first release, a
    later boot the newest release out by then if the device takes it (one draw per device and
    release), never older than the boot before."""
    rng = np.random.default_rng(cfg.seed + 7919)
    t0 = int(cfg.start.timestamp() * 1_000_000)
    out: dict[tuple[str, int], str] = {}
    first = boots.sort_values(["device_id", "first_seen_ts", "boots"], kind="mergesort")
    for dev, rows in first.groupby("device_id", sort=True):
        takes = rng.random(len(rc.releases)) < rc.adoption
        cur = 0
        for i, (epoch, seen) in enumerate(zip(rows["boot_epoch"], rows["first_seen_ts"], strict=True)):
            day = (int(seen.value // 1000) - t0) / DAY_US
            if i > 0:
                for r, (_, out_day) in enumerate(rc.releases):
                    if r > cur and out_day <= day and takes[r]:
                        cur = r
            out[(str(dev), int(epoch))] = rc.releases[cur][0]
    return out


def _with_firmware(t: pa.Table, fw: dict[tuple[str, int], str]) -> pd.DataFrame:
    df = t.to_pandas()
    keys = zip(df["device_id"].astype(str), df["boot_epoch"].astype("int64"), strict=True)
    df["firmware_version"] = [fw[k] for k in keys]
    return df


def _make_worse(arr: pd.DataFrame, rc: RolloutConfig, seed: int) -> pd.DataFrame:
    """Drop rc.extra_loss of the worse release's arrivals that are their seq's only copy and not the
    first or last arrival of their domain; recompute the stored lead of the domains touched;
    stretch the release's latencies by rc.latency_factor."""
    rng = np.random.default_rng(seed + 104729)
    arr = arr.sort_values([*LEAD_DOMAIN, "arrival", "bridge_id"], kind="mergesort").reset_index(drop=True)
    bad = arr["firmware_version"] == rc.worse
    if rc.extra_loss > 0:
        g = arr.groupby(LEAD_DOMAIN, sort=False)
        copies = arr.groupby([*LEAD_DOMAIN, "seq"], sort=False)["seq"].transform("size")
        pos = g.cumcount()
        size = g["seq"].transform("size")
        can = bad & (copies == 1) & (pos > 0) & (pos < size - 1)
        drop = can & (rng.random(len(arr)) < rc.extra_loss)
        touched = arr.loc[drop, LEAD_DOMAIN].drop_duplicates()
        arr = arr[~drop].reset_index(drop=True)
        hit = arr.merge(touched.assign(_t=True), on=LEAD_DOMAIN, how="left")["_t"].notna().to_numpy()
        lead = arr["lead"].to_numpy().copy()
        for _, idx in arr[hit].groupby(LEAD_DOMAIN, sort=False).groups.items():
            ix = np.asarray(idx)
            lead[ix] = bridge_lead(arr["seq"].to_numpy()[ix])[0]
        arr["lead"] = lead
        bad = arr["firmware_version"] == rc.worse
    if rc.latency_factor != 1.0:
        rx = arr["host_rx_ts"]
        f = rc.latency_factor
        arr.loc[bad, "host_commit_ts"] = rx[bad] + (arr.loc[bad, "host_commit_ts"] - rx[bad]) * f
        arr.loc[bad, "gen_ts"] = rx[bad] - (rx[bad] - arr.loc[bad, "gen_ts"]) * f
        for c in ("host_commit_ts", "gen_ts"):
            arr[c] = arr[c].dt.floor("us")
    return arr


def generate_rollout(cfg: SynthConfig, rc: RolloutConfig) -> dict[str, pa.Table]:
    """synth.generate(cfg) with the firmware of every boot rewritten by the rollout (and the worse
    release made worse): the three export tables."""
    tables, _ = generate(cfg)
    fw = _boot_firmware(tables["boots"].to_pandas(), cfg, rc)
    out = {}
    for name in ("arrivals", "losses", "boots"):
        df = _with_firmware(tables[name], fw)
        if name == "arrivals" and rc.worse is not None:
            df = _make_worse(df, rc, cfg.seed)
        out[name] = pa.Table.from_pandas(df, schema=TABLES[name], preserve_index=False)
    return out


def write_rollout(cfg: SynthConfig, rc: RolloutConfig, out_dir: str) -> dict[str, pa.Table]:
    """generate_rollout written as an export under out_dir (the `leadwire export` layout)."""
    tables = generate_rollout(cfg, rc)
    write_export(tables, out_dir)
    return tables
