# leadwire protocol core: sans-I/O, runs unchanged on MicroPython and CPython.
# Modules: u32 (offset arithmetic), ring (spec 004), frames (spec 002), lead (spec 000),
# reports (spec 003), wire (frame header + CRC), messages (payload layouts), framing (COBS).
__version__ = "0.1.0"
