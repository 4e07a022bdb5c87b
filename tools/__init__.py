"""leadwire.tools: virtual boards, flashing, network impairment and fleet simulation."""
