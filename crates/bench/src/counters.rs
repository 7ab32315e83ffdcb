//! What each index counter in a report counts, in plain words, for the table's labels.
//!
//! Indexes name their counters ([`dmindex_index::IndexStats::extra`]); several share a name
//! for the same event (a leaf split, a torn leaf read), so the words are kept here, once, by
//! name. A counter missing from this list is printed with a pointer to its index's page in
//! `docs/`; the catalog's tests check that every index's counters are listed.

/// Counters by name, with what they count. Sorted by name (a test checks).
const LABELS: &[(&str, &str)] = &[
    ("backtracks", "searches whose cached route led to a leaf that had split since"),
    ("bucket_reads", "hash-table bucket reads"),
    ("cached_nodes", "tree nodes in the compute node's cache (a level, not a count of events)"),
    ("chain_hops", "bucket reads past the first of a chain"),
    (
        "claims_taken_over",
        "model claims taken over from a retrainer judged dead before it published",
    ),
    ("closed_wait_reads", "reads of a closed segment's metadata while waiting for it"),
    ("closed_waits", "waits for a closed segment (being merged or split) to reopen"),
    (
        "collision_groups_formed",
        "prefixes whose long keys a leaf gathered into one collision group (CHIME, Sherman)",
    ),
    ("compactions", "leaves compacted to make room (dropping deleted or superseded pairs)"),
    (
        "context_refreshes",
        "reads of the table context after its word changed (CLevel: a level added or dropped)",
    ),
    ("crash_repairs", "splits, merges or locks a crashed client left, taken over and finished"),
    ("dead_holders_repaired", "leaves freed after their lock holder was judged dead and fenced"),
    ("dir_refreshes", "reads of the remote directory after the cached one proved stale"),
    ("directory_depth", "global directory depth each compute node has seen, summed (a level)"),
    ("directory_refresh_bytes", "bytes read by directory refreshes"),
    ("directory_refreshes", "reads of the remote directory after the cached one proved stale"),
    ("failovers", "view changes (replica failovers) this client started"),
    ("fptable_refreshes", "reads of a main segment's header into the cache after a merge"),
    ("fresh_restarts", "tree descents started again from the root without the cache"),
    (
        "group_migrations",
        "groups of runs sent one level down (Plush: runs merged, split by the next digit)",
    ),
    ("half_splits_finished", "separators put in a parent for a splitter that did not (it died)"),
    ("insert_levels_read", "levels inserts read (CLevel; per insert attempt: this / inserts)"),
    ("insert_withdrawals", "inserts that placed an entry, found the key present, and took it back"),
    (
        "kv_cache_hits",
        "searches answered from the client's copy of a block it published (no block READ)",
    ),
    ("leaf_keys_at_split", "keys the leaves held when they split, summed"),
    ("leaf_lock_waits", "looks at a leaf that another client held locked"),
    ("leaf_moves", "leaves rewritten elsewhere because a new value did not fit in place"),
    ("leaf_moves_right", "steps right along the leaf chain past a concurrent split"),
    (
        "leaf_slots_at_split",
        "slots the leaves that split had, summed (fill at split = keys / this)",
    ),
    ("leaf_splits", "leaves split in two"),
    (
        "leaf_table_evictions",
        "learned models' leaf tables dropped from the cache to keep its budget",
    ),
    ("level_compactions", "deepest-level groups whose runs were merged into one (Plush)"),
    ("lock_repairs", "leaf locks taken over from a dead holder and repaired"),
    ("lookup_requests", "lookups sent to a memory node's CPU (two-sided requests)"),
    ("lost_key_cas", "compare-and-swaps of a key slot that lost to another writer"),
    ("lost_ptr_cas", "compare-and-swaps of a value pointer that lost to another write of the key"),
    ("mains_reused", "main segments reused from the free list instead of allocated"),
    ("merge_key_reads", "keys read by merges (to sort a segment's new entries)"),
    ("merges", "segment merges (new entries folded into the sorted main segment)"),
    ("migrated_entries", "entries migrations moved one level down"),
    ("misses", "attempts that missed (a stale view or a node down) and were retried"),
    ("models", "learned models in the compute node's cache (a level)"),
    (
        "moved_entries",
        "entries a rehash moved out of the bottom level into the levels above (CLevel)",
    ),
    ("new_prefixes", "new key prefixes placed in the radix tree"),
    ("path_splits", "compressed radix-tree paths split to make room for a new prefix"),
    ("publish_retries", "retries to publish retrained models (another client published first)"),
    ("push_downs", "leaves pushed one level down the radix tree under a new inner node"),
    ("rdwc_entered", "operations that entered a read-delegation / write-combining slot"),
    ("rdwc_reads", "searches that came to the read-delegation table"),
    ("rdwc_reads_delegated", "searches answered by another client's read of the same key"),
    ("rdwc_writes", "writes that came to the write-combining table"),
    ("rdwc_writes_combined", "writes combined into another client's write of the same key"),
    ("rebuilds", "replicas this client rebuilt after a memory-node restart"),
    ("rehash_takeovers", "rehashes taken over from a rehasher judged dead and fenced (CLevel)"),
    ("rehashes", "bottom levels drained and dropped from the table (CLevel)"),
    ("resize_bytes", "bytes moved by merges and splits"),
    ("resizes", "levels added on top of the table (CLevel)"),
    ("retiring_checks", "reads of the root to see whether a retraining replaced the directory"),
    ("retrained_keys", "keys retraining read and placed again"),
    ("retrains", "model retrainings this client did"),
    ("retry_cas_lost", "retries: an append's compare-and-swap of a free slot lost"),
    ("retry_foreign_segment", "retries: the cached directory led to a segment since split"),
    ("retry_meta_moved", "retries: a segment's metadata changed around a read"),
    ("retry_offset_past_free", "retries: the cached append offset was past the first free slot"),
    ("retry_stale_main", "retries: the cached main segment had been replaced by a merge"),
    ("scan_items", "pairs scans returned"),
    ("scan_refreshes", "scan steps that found the leaf list changed and read it again"),
    ("scan_requests", "scans sent to a memory node's CPU (two-sided requests)"),
    ("scan_rounds", "rounds of leaf reads scans issued (one round trip each)"),
    ("search_buckets_read", "buckets and runs searches read (per search: this / searches)"),
    ("search_cache_hits", "searches that found their leaf through the compute node's cache"),
    ("search_combined_buckets_read", "buckets searches read (per search: this / searches)"),
    ("search_cur_reads", "searches that read the current (unsorted) segment"),
    (
        "search_levels_read",
        "levels searches read (Plush: below the top; CLevel: all; per search: this / searches)",
    ),
    ("search_segment_reads", "segment reads searches made"),
    ("search_spills", "searches whose read window missed part of the key's run (a re-read)"),
    ("searches", "searches"),
    ("signature_misses", "entries whose signature matched but whose key did not"),
    ("smo_retries", "structure changes (splits, compactions) that had to start over"),
    ("speculative_hits", "speculative reads that found their key (one round trip saved)"),
    ("speculative_reads", "speculative reads of a hot key's cached position (hotspot buffer)"),
    ("split_attempts", "splits begun (every lock compare-and-swap a split tried)"),
    ("split_moved_entries", "entries splits moved to the new segment"),
    ("splits", "splits of a leaf or segment"),
    ("stale_cached_parents", "cached parent nodes found stale by a child's back pointer"),
    ("stale_refusals", "attempts a replica refused because it serves another view"),
    ("synonym_leaves", "overflow (synonym) leaves added under a full model position"),
    ("tentative_aborts", "other inserts' tentative entries aborted (racing inserts of one key)"),
    ("tombstones_dropped", "deletion markers dropped by migrations (nothing older lay below)"),
    ("top_migrations", "top groups whose entries were sent one level down (a full top bucket)"),
    ("torn_leaf_reads", "leaf reads seen torn by a concurrent write, and read again"),
    ("torn_reads", "reads seen torn by a concurrent write, and read again"),
    ("turned_away_by_smo", "operations turned away by a structure change in progress, retried"),
    ("type_switches", "radix-tree nodes switched to a larger node type"),
    (
        "updates_superseded",
        "updates and upserts whose CAS lost to a later write of their key: done",
    ),
];

/// What the counter `name` counts, if it is listed.
pub fn counter_label(name: &str) -> Option<&'static str> {
    LABELS.binary_search_by(|(n, _)| n.cmp(&name)).ok().map(|i| LABELS[i].1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_sorted_unique_and_found() {
        assert!(LABELS.windows(2).all(|w| w[0].0 < w[1].0), "sorted, no duplicates");
        for (name, label) in LABELS {
            assert_eq!(counter_label(name), Some(*label));
        }
        assert_eq!(counter_label("no_such_counter"), None);
    }
}
