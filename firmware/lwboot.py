# Boot: read config.json and check it value by value (a bad or missing value is reported on the
# console and replaced by its safe default: never raised), count the boot, open the links, build
# the HELLO. main.py unloads this module once the agent is built.
#
# Memory: the interpreter keeps every short string literal and every name it loads as a qstr for
# good, even after this module is unloaded. So this module defines one function, and the config
# keys and defaults live in long strings (never interned) split at run time.

# "path default low high" -- settings in lwagent's order (0 ring capacity, 1 slot size, 2 tick ms,
# 3 health channel, 4 health period ms, 5 alarm channel, 6 alarm priority, 7 periodic alarm ms,
# 8 min ms between bad-frame alarms, 9 report period ms, 10 report body bytes, 11 ACK timeout ms,
# 12 report priority, 13 close priority), then the link and sensor settings
SPEC = (
    "ring 256 1 4096,slot 16 8 512,tick 1 0 100,health.ch 8 0 255,health.ms 5000 0 3600000,"
    "alarm.ch 9 0 255,alarm.prio 7 0 15,alarm.ms 0 0 3600000,alarm.gap 1000 0 60000,"
    "report.ms 250 0 60000,report.bytes 512 64 4096,report.timeout 1000 10 60000,"
    "report.prio 0 0 15,report.close 3 0 15"
    "|port 4210 1 65535,frame 1024 64 1472,gap 0 0 1000"  # udp
    "|port 0 0 0,frame 256 64 2059,gap 0 0 1000"  # serial
    "|ch 1 0 255,hz 10 0 1000000,size 16 2 512"  # a sensor (hz 0: as fast as it can)
    "|config.json|0.1.0|id sensors udp serial wlan bind host key auth|1 10 16 2 2 12"  # default sensors
    "|starting again on safe defaults (links, id and wlan kept from config.json)"  # after a failure
    "|starting again on safe defaults without config.json|giving up"
    '|authentication needs "key" (32..128 hex digits) or "auth": false'  # issue 6
    "|wdt 0 0 8388"  # the watchdog's timeout in ms (0: off; 8388: rp2's longest)
)


def build(board, hold=None):
    """config.json -> (settings, ring, sensors, links, extra tasks), or None when the agent cannot
    run (no link, or every attempt failed: said on the console in a line starting "leadwire: not
    ready"). Never raises: an attempt that fails is reported and followed by one on safe defaults:
    tier 1 keeps only the config's links, id and wlan, tier 2 nothing of it. The config and the
    boot count are read once: a retry reads neither file again. A failed attempt closes every
    link it opened first, so the next one finds its ports free. hold: main.py's list holding a
    block taken before the boot fragmented the heap, released for the ring.

    Authentication is decided once, from the config as read, whatever the tier (a fallback never
    turns it off): "auth": false -> off; a valid "key" -> on; no key, or a bad one -> not ready
    ("leadwire: not ready: no key" / "bad key"), said without any key material."""
    st: list = [hold]  # the config as read, the boot count, the auth key (auth.Key, None: off)
    for tier in range(3):
        try:
            b = _attempt(board, st, tier)
            break
        except Exception as e:  # report anything, then try again on safe defaults
            b = None
            if st[0]:
                st[0].pop()  # main.py's block, if the failure came before the ring took it
            print("boot: %r; %s" % (e, SPEC.split("|")[8 + tier]))
    if isinstance(b, str):  # no key or a bad key: nothing may reach the agent unauthenticated
        print("leadwire: not ready: %s; fix config.json and reset" % b)
        return None
    if b is None or not b[3]:
        # nothing could reach the agent: say so and stop (the REPL on a board; the launcher
        # reports it as a failure) rather than claim to be ready, or reset in a loop
        print("leadwire: not ready: %s; fix config.json and reset" % ("no link" if b else "boot failed"))
        return None
    k = b[0]
    if k[16]:  # config "wdt": the watchdog, from here on (a WLAN join at boot may outlast it)
        try:
            import machine

            k[16] = machine.WDT(timeout=k[16])  # lwagent's io loop feeds it
        except Exception as e:  # the unix port has none
            print("wdt: %r; off" % (e,))
            k[16] = None
    return b


def _attempt(board, st, tier):
    import gc
    import json

    # the core modules first: loaded before the config and the boot fragment the heap beside
    # main.py's block (later, a 64K heap may have no 272-byte hole left for them)
    from leadwire._compat import random_u32
    from leadwire.device import hello_into
    from leadwire.framing import StreamDecoder
    from leadwire.ring import EventRing

    spec, uspec, sspec, sensor, config, fw, keys, dsens = SPEC.split("|")[:8]
    kid, ksens, kudp, kser, kwlan, kbind, khost, kkey, kauth = keys.split()

    def ints(d, spec, where):
        out = []
        for item in spec.split(","):
            path, dflt, lo, hi = item.split()
            dflt, lo, hi = int(dflt), int(lo), int(hi)
            v = d
            for p in path.split("."):
                v = v.get(p) if isinstance(v, dict) else None
            if v is not None and (type(v) is not int or not lo <= v <= hi):
                print("config: %s%s must be an integer in %d..%d; using %d" % (where, path, lo, hi, dflt))
                v = None
            out.append(dflt if v is None else v)
        return out

    def addr(s, port):
        # "host:port" or "host" -> socket address (socket: imported with the UDP link)
        if ":" in s:
            s, port = s.rsplit(":", 1)
        return socket.getaddrinfo(s, int(port))[0][-1]

    if len(st) == 1:
        # first attempt: read the config and count the boot (on the board's flash), once
        try:
            with open(config) as f:
                d = json.load(f)
        except OSError:
            print("config: no %s on the board; using safe defaults" % config)
            d = {}
        except ValueError as e:
            print("config: %s is not valid JSON (%s); using safe defaults" % (config, e))
            d = {}
        if not isinstance(d, dict):
            print("config: %s is not a JSON object; using safe defaults" % config)
            d = {}
        n = 0
        try:
            with open("boots") as f:
                n = int(f.read())
        except (OSError, ValueError):
            pass
        try:
            with open("boots", "w") as f:
                f.write(str(n + 1))
        except OSError:
            print("boot: cannot store the boot count")
        st += [d, n + 1]
        # the auth choice, once (never printed: the key). Only checked here; auth.py is loaded
        # after the ring (its ~7 KB must not split the block the ring takes)
        t = d.get(kkey)
        try:
            # "auth": false: off; else a key is required (bad key: never said which digit)
            t = None if d.get(kauth) is False else bytes.fromhex(t.strip())  # type: ignore
            if t is not None and not 16 <= len(t) <= 64:
                raise ValueError
        except Exception:  # no key (None, not a str) or a bad one
            t = "bad key" if t else "no key"
            print("config: %s: %s" % (t, SPEC.split("|")[11]))
        st.append(t)
    if type(st[3]) is str:
        return st[3]
    ak = st[3]
    ax = 8 if ak else 0  # auth.AUTH_SIZE: the trailer of a signed frame
    d = st[1]
    if tier:
        d = {key: d[key] for key in (kid, kudp, kser, kwlan) if tier == 1 and key in d}
    k = ints(d, spec, "")
    if k[3] == k[5]:
        print("config: health and alarm channels must differ; using 8 and 9")
        k[3], k[5] = 8, 9
    # the links' settings (opened after the ring): (key, object, port, frame size, gap)
    lk = []
    for key in (kudp, kser):
        c = d.get(key, {})  # an object, false (link off) or missing (on, with defaults)
        if c is False:
            continue
        if not isinstance(c, dict):
            print("config: %s must be an object or false; using defaults" % key)
            c = {}
        lk.append([key, c] + ints(c, uspec if key == kudp else sspec, key + ": "))
    ss = d.get(ksens)
    if ss is None:
        v = [int(x) for x in dsens.split()]
        names = [item.split()[0] for item in sensor.split(",")]
        ss = [dict(zip(names, v[i : i + 3])) for i in (0, 3)]
    elif not isinstance(ss, list):
        print("config: sensors must be a list; none used")
        ss = []
    sk = []
    chans = [k[3], k[5]]
    for s in ss[:8]:
        ch, hz, size = ints(s if isinstance(s, dict) else {}, sensor, "sensors: ")
        if ch in chans or size > k[1]:
            print("config: sensor on channel %d: channel taken or size above slot %d; skipped" % (ch, k[1]))
            continue
        chans.append(ch)
        sk.append((ch, hz, size))
    # The radio first, when a UDP link needs one: ESP32's RNG is only pseudo-random until it runs,
    # and the free heap measured below must not count the IDF RAM Wi-Fi takes when it starts.
    # net: the station, None (no ssid: no UDP), or what bringing it up raised (said per link)
    net = w = None
    if board.KIND != "unix" and [x for x in lk if x[0] == kudp]:
        w = d.get(kwlan)
        w = w if isinstance(w, dict) else {}
        try:
            net = board.network(w)
        except MemoryError:
            raise
        except Exception as e:  # no network module, no rp2.country, Wi-Fi refused: UDP only
            net = e
    # The epoch and the ring's start: the RNG mixed with the boot count and the board id, so two
    # boots never share one even where os.urandom is constant (an emulated Pico) or weak; the
    # odd multiplier keeps distinct boot counts distinct (mod 2^32). Allocates: boot only.
    mx = st[2] * 0x9E3779B1
    for c in board.uid():
        mx = mx * 31 + ord(c)
    mx &= 0xFFFFFFFF
    epoch = random_u32() ^ mx
    mx = random_u32() ^ mx ^ 0x5A5A5A5A  # the ring's start (drawn here: no garbage where it goes)
    # Does the ring fit? It must leave, once the agent is ready, the free heap it needs at run time:
    # the garbage between two collections (gc.threshold 4 KB), the push-session modules (~4.7 KB)
    # and 3 report bodies, plus slack: 10.3 KB + 3 bodies. From here to ready the rest of the boot
    # and the agent cost the frame and serial buffers and the sensors, less ~3.2 KB (lwboot is
    # unloaded). With a key, auth.py, lwauth, the key and an endpoint per link: ~11 KB for one link, ~12 KB
    # for two (free heap at ready, auth on vs off). Measured on the unix port (64-bit): pessimistic
    # for 32-bit boards. board.mem_free(): gc.mem_free() (ESP32: less the IDF RAM left to Wi-Fi).
    if st[0]:
        st[0].pop()  # main.py's block: the ring goes where it was, in one piece
    gc.collect()
    free = board.mem_free()
    need = 7100 + 3 * k[10] + max([x[3] for x in lk] + [0]) + (9900 + 1100 * len(lk) if ak else 0)
    for x in lk:
        need += 2 * x[3] + 400 if x[0] == kser else 0
    for x in sk:
        need += x[2] + 96
    # the links' buffers, then the ring at once: the big blocks before anything fragments the heap
    # (one frame buffer for all links: frames are built and sent without an await in between)
    # with auth on, every buffer has room for the 8-byte trailer after the largest unsigned frame;
    # the answers and fragments are sized so that the signed frame still fits the link's frame
    shared = bytearray(max([x[3] for x in lk] + [0]) + ax)
    sb = [
        [bytearray(64), bytearray(x[3] + ax + (x[3] + ax) // 254 + 2), StreamDecoder(128 + ax)]
        for x in lk
        if x[0] == kser
    ]
    ring = None
    if k[0] * (3 + k[1]) + need <= free:
        try:
            ring = EventRing(k[0], mx, k[1], epoch)
        except MemoryError:
            pass
    if ring is None:
        print(
            "config: ring %dx%d (%d B) does not fit: %d B free, the agent needs %d B besides; using 256x16"
            % (k[0], k[1], k[0] * (3 + k[1]), free, need)
        )
        k[0], k[1] = 256, 16
        ring = EventRing(256, mx, 16, epoch)
    sensors = []
    for ch, hz, size in sk:
        if size > k[1]:
            print("config: sensor on channel %d: size above slot %d; skipped" % (ch, k[1]))
            continue
        b = bytearray(size)
        for i in range(2, size):
            b[i] = ch
        sensors.append([ch, 1000000 // hz if hz else 0, size, 0, 0, b])
    name = d.get(kid)
    if not isinstance(name, str):
        name = board.uid()
    # 14 the boot count, 15 the auth key (bytes; None: auth off), 16 the watchdog's ms (0: off)
    k += [st[2], ak] + ints(d, SPEC.split("|")[12], "")  # (the fallback tiers: no watchdog)
    links = []
    tasks = []
    opened: list = []  # (io, peer: False for serial, UDP address or None, frame size, gap)
    try:
        for key, c, port, frame, gap in lk:
            try:
                if key == kser:
                    io = board.serial(c)
                    if io is not None:
                        opened.append((io, False, frame, gap))
                    continue
                if board.KIND != "unix":
                    if net is None:
                        print("udp: no wlan ssid in config: UDP off")
                        continue
                    if isinstance(net, Exception):
                        raise net
                    import wlan

                    tasks.append((wlan.keep, (net, w)))  # started by lwagent.start
                import socket  # only here: a board without networking (plain Pico) has none

                bind = c.get(kbind)
                if not isinstance(bind, str):  # a virtual board's network is the host's loopback
                    bind = "127.0.0.1" if board.KIND == "unix" else "0.0.0.0"
                h = c.get(khost)
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                try:
                    s.bind(addr(bind, port))
                    opened.append((s, addr(h, port) if isinstance(h, str) else None, frame, gap))
                except BaseException:
                    s.close()  # not left bound: a retry (or the next boot) needs the port
                    raise
            except MemoryError:
                raise  # the heap: the whole attempt again, on safe defaults
            except Exception as e:  # whatever a port raises (no socket or network module:
                # ImportError; no rp2.country: AttributeError; OSError, ValueError): this link only
                print("%s: cannot open (port %d): %r" % (key, port, e))
        for io, peer, frame, gap in opened:
            # a link, as lwagent indexes it: io, udp, tx, memoryview(tx), frame queue (made on the
            # first SUBSCRIBE), gap, next send, sessions, message owners, resend list, peer (UDP:
            # where the HELLO after boot and reports go), HELLO; serial: read chunk, COBS buffer,
            # decoder (UDP: None x 3); auth endpoint (None: auth off), payload budget of a frame
            tx = memoryview(shared)[: frame + ax]
            L = [io, peer is not False, tx, memoryview(tx), None, gap, 0, {}, {}, [], peer or None, b""]
            L += sb[0] if peer is False else [None, None, None]
            L += [None, frame - 12 - ax]  # the auth endpoint: main.py, after this module is gone
            links.append(L)
        for L in links:
            tx = L[2]
            m = hello_into(tx, epoch, k[0], k[1], len(tx) - ax, k[14], (name, fw, board.KIND), ax // 2)
            L[11] = bytes(tx[:m])
    except BaseException:
        for o in opened:  # a retry must find its ports free (EADDRINUSE otherwise)
            o[0].close()
        raise
    kinds = " ".join("%s:%d" % (kudp, lk[0][2]) if L[1] else kser for L in links)  # udp: its port
    print(
        "leadwire %s on %s, id %s, boot %d, epoch %08x, ring %dx%d, links %s, auth %s"
        % (fw, board.KIND, name, k[14], epoch, k[0], k[1], kinds or "none", "on" if ax else "off")
    )
    return k, ring, sensors, links, tasks
