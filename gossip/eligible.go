package gossip

import "fmt"

// SetEligible changes whether this node advertises that it may lead (the
// reserved "e" tag) and replaces its extra tags, as SetTags does, in one
// update. The change spreads by gossip as an EventUpdate.
func (m *Membership) SetEligible(eligible bool, extra map[string]string) error {
	if err := checkExtraTags(extra); err != nil {
		return err
	}
	m.tagsMu.Lock()
	defer m.tagsMu.Unlock()
	if m.isClosed() || m.left.Load() {
		return ErrShutdown
	}
	id := m.ident
	id.eligible = eligible
	if err := m.publishTags(encodeTags(id, extra)); err != nil {
		return fmt.Errorf("gossip: set eligible: %w", err)
	}
	m.ident = id
	return nil
}
