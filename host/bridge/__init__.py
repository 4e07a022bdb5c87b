"""leadwire.bridge: the host bridge daemon (polling, recovery, subscriptions, durable store)."""
