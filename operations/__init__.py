"""Operations: alarms raised and cleared by the engine, and the audit trail of control-plane
changes."""
