package backupd

// BackupOptions configure BackupNow.
type BackupOptions struct {
	// Member to stream from (default: the leader).
	Member string
	// KeyFile overrides the spec's encryption key file.
	KeyFile string
}

// BackupNow takes a verified full snapshot from a healthy member (the leader
// by default) and stores it with its manifest.
func (c *Cluster) BackupNow(ctx context.Context, o BackupOptions) (backup.Manifest, error) {
	st, err := c.Status(ctx)
	if err != nil {
		return backup.Manifest{}, err
	}
	name := o.Member
	if name == "" {
		if st.Cluster.Leader == "" {
			return backup.Manifest{}, fmt.Errorf("refusing to back up: the cluster has no leader (%s); name a healthy member with --member", unhealthySummary(st))
		}
		name = st.Cluster.Leader
	}
	if _, err := c.Member(name); err != nil {
		return backup.Manifest{}, err
	}
	m, _ := st.Member(name)
	if !m.Healthy {
		return backup.Manifest{}, fmt.Errorf("refusing to back up from %s: it is not healthy (%s)", name, m.LastError)
	}
	key, err := c.backupKey(o.KeyFile)
	if err != nil {
		return backup.Manifest{}, err
	}
	store, err := c.BackupStore()
	if err != nil {
		return backup.Manifest{}, err
	}
	cli, err := c.Client(m.ClientURLs...)
	if err != nil {
		return backup.Manifest{}, err
	}
	defer cli.Close()
	tmp := filepath.Join(c.Dir, "tmp")
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return backup.Manifest{}, err
	}
	c.Progress.Say("streaming a snapshot from %s (db %s)", name, progress.Bytes(m.DBSize))
	man, err := backup.TakeFull(ctx, cli, store, backup.FullOptions{
		Member: name, ClusterID: st.Cluster.ID, EtcdVersion: m.Version, Key: key, TempDir: tmp,
	})
	if err != nil {
		return backup.Manifest{}, err
	}
	c.Progress.Say("stored %s: revision %d, %s (from %s) in %s", man.ID, man.EndRevision,
		progress.Bytes(man.Size), progress.Bytes(man.RawSize), store)
	return man, nil
}

