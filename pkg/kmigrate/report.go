package kmigrate

import "time"

// Results of a resource in a Report.
const (
	// ResultMigrated: every object was rewritten (or was gone); the
	// storageVersionHash is recorded for --auto.
	ResultMigrated = "migrated"
	// ResultFailed: the list was walked to its end, but the API server
	// refused some objects (Failures says which and why).
	ResultFailed = "failed"
	// ResultUpToDate: --auto found the storageVersionHash of the last
	// complete migration; nothing was done.
	ResultUpToDate = "upToDate"
	// ResultError: the resource could not be migrated (its list failed);
	// Error says why.
	ResultError = "error"
	// ResultInterrupted: the run stopped in the middle of the resource
	// (interrupted, or the API server kept failing); running the command
	// again resumes after the last saved chunk.
	ResultInterrupted = "interrupted"
	// ResultNotStarted: the run stopped before this resource.
	ResultNotStarted = "notStarted"
)

// Report is the summary of a migration run.
type Report struct {
	// Server is the API server's URL.
	Server string `json:"server"`
	// StateFile is the state database.
	StateFile string `json:"stateFile"`
	// Auto is true with --auto.
	Auto bool `json:"auto"`
	// Resources are the selected resources, in the order migrated.
	Resources []ResourceReport `json:"resources"`
	// Excluded are resources --all left out, and why; omitted when none.
	Excluded []Excluded `json:"excluded,omitempty"`
	// Totals add up the resources.
	Totals Totals `json:"totals"`
	// Duration of the run, nanoseconds.
	Duration time.Duration `json:"durationNs"`
}

// Counts are objects migrated, skipped and failed.
type Counts struct {
	// Migrated objects were rewritten (an update that changes nothing).
	Migrated int64 `json:"migrated"`
	// Skipped objects were deleted between the list and their update.
	Skipped int64 `json:"skipped"`
	// Failed objects were refused by the API server.
	Failed int64 `json:"failed"`
}

// ResourceReport is one resource of a Report.
type ResourceReport struct {
	// Resource is kubectl's name (configmaps, deployments.apps).
	Resource string `json:"resource"`
	Group    string `json:"group"`
	// Version is the API version the requests used.
	Version string `json:"version"`
	// StorageVersionHash is discovery's hash of the storage version.
	StorageVersionHash string `json:"storageVersionHash,omitempty"`
	// Result is one of the Result constants.
	Result string `json:"result"`
	// Resumed is true when this run continued an interrupted one.
	Resumed bool `json:"resumed"`
	// Counts (embedded: migrated, skipped, failed) are of the whole
	// migration of the resource, including the runs it resumed.
	Counts
	// ThisRun counts only what this run did.
	ThisRun Counts `json:"thisRun"`
	// Retries of transient failures (429, 5xx, timeouts), conflicts (409)
	// answered by getting the object again, and expired continue tokens
	// (410) in this run.
	Retries      int64 `json:"retries"`
	Conflicts    int64 `json:"conflicts"`
	ListRestarts int64 `json:"listRestarts"`
	// Duration of this run's work on the resource, nanoseconds.
	Duration time.Duration `json:"durationNs"`
	// Error is why the resource could not be migrated; omitted when empty.
	Error string `json:"error,omitempty"`
	// Failures are the objects refused (the first 100, in key order);
	// always an array.
	Failures []Failure `json:"failures"`
}

// Totals add up a report's resources.
type Totals struct {
	// Resources selected.
	Resources int `json:"resources"`
	Counts
	// ThisRun counts only what this run did.
	ThisRun Counts `json:"thisRun"`
}

// OK reports whether every resource is migrated or up to date.
func (r *Report) OK() bool {
	for _, rr := range r.Resources {
		if rr.Result != ResultMigrated && rr.Result != ResultUpToDate {
			return false
		}
	}
	return true
}

func (r *Report) total() {
	t := Totals{Resources: len(r.Resources)}
	for _, rr := range r.Resources {
		t.Migrated += rr.Migrated
		t.Skipped += rr.Skipped
		t.Failed += rr.Failed
		t.ThisRun.Migrated += rr.ThisRun.Migrated
		t.ThisRun.Skipped += rr.ThisRun.Skipped
		t.ThisRun.Failed += rr.ThisRun.Failed
	}
	r.Totals = t
}
