DROP INDEX IF EXISTS {{.Schema}}.{{.SlotIndex}};
DROP SEQUENCE IF EXISTS {{.ClaimSlot}};
