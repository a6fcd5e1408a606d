//! Publishing the counters other subsystems keep (cache, stores, backend
//! pools) into the shared-memory counter segment, next to the `MAIN`
//! counters the request path updates directly.
//!
//! The cache and the stores count with their own atomics because they are
//! libraries that know nothing of shared memory; a 100 ms housekeeping tick
//! copies their values here, which is how often varnishtest and exporters
//! look anyway.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, Weak};

use lacquer_vsl::vsc::tables::{
    LCK, Lck, MEMPOOL, MSE, Mempool, Mgt, Mse, SMA, SMF, Sma, Smf, VBE, Vbe,
};
use lacquer_vsl::vsc::{Section, Vsc, VscError};

use crate::runtime::counters::Main;
use crate::runtime::state::Shared;
use crate::runtime::vcls::BackendRt;

/// Sections whose values are copied on each tick.
pub struct Sections {
    vsc: Vsc,
    mgt: Section,
    /// Per store: `SMA.<name>`, or `SMF.<name>` for a file store.
    sma: Vec<Section>,
    /// `MSE.<name>` of each persistent store: (its index in the stores,
    /// the section).
    mse: Vec<(usize, Section)>,
    lck_conn_pool: Section,
    /// `MEMPOOL.req<n>` and `MEMPOOL.sess<n>`, one pair per thread pool.
    mempool: Vec<(Section, Section)>,
    vbe: Mutex<Vec<(Weak<BackendRt>, Section)>>,
    /// `TLS`, made on the first tick after a VCL made a TLS backend when
    /// no TLS listener made it at startup.
    tls_backends: std::sync::OnceLock<Section>,
}

impl std::fmt::Debug for Sections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sections").finish_non_exhaustive()
    }
}

impl Sections {
    /// The sections of `sh`'s stores and pools; `mgt` is the `MGT`
    /// section, added by the caller before `MAIN` so that it lists first.
    pub fn new(vsc: &Vsc, sh: &Shared, mgt: Section) -> Result<Sections, VscError> {
        let mut sma = Vec::new();
        let mut mse = Vec::new();
        for (i, s) in sh.stores.iter().enumerate() {
            if s.disk().is_some() {
                mse.push((i, vsc.add_section(&MSE, &format!("MSE.{}", s.name()))?));
            }
        }
        for s in &sh.stores {
            sma.push(match s.file_stats() {
                Some(_) => vsc.add_section(&SMF, &format!("SMF.{}", s.name()))?,
                None => vsc.add_section(&SMA, &format!("SMA.{}", s.name()))?,
            });
        }
        let pools = sh.params().uint("thread_pools");
        let mut mempool = Vec::new();
        for i in 0..pools {
            mempool.push((
                vsc.add_section(&MEMPOOL, &format!("MEMPOOL.req{i}"))?,
                vsc.add_section(&MEMPOOL, &format!("MEMPOOL.sess{i}"))?,
            ));
        }
        Ok(Sections {
            vsc: vsc.clone(),
            mgt,
            sma,
            mse,
            lck_conn_pool: vsc.add_section(&LCK, "LCK.conn_pool")?,
            mempool,
            vbe: Mutex::new(Vec::new()),
            tls_backends: std::sync::OnceLock::new(),
        })
    }

    /// Adds a section of counters to the segment (those vmods publish),
    /// withdrawn when the returned section is dropped.
    pub fn add_section(
        &self,
        schema: &'static lacquer_vsl::vsc::Schema,
        name: &str,
    ) -> Result<Section, VscError> {
        self.vsc.add_section(schema, name)
    }

    /// Copies current values into the segment.
    pub fn publish(&self, sh: &Arc<Shared>) {
        if let Some(t) = sh.tls.get() {
            crate::runtime::tls::publish_backend(&t.counters);
        } else if crate::backend::pool::TLS_BACKENDS.load(Ordering::Relaxed) {
            if self.tls_backends.get().is_none()
                && let Ok(s) = self.vsc.add_section(&lacquer_vsl::vsc::tables::TLS, "TLS")
            {
                let _ = self.tls_backends.set(s);
            }
            if let Some(s) = self.tls_backends.get() {
                crate::runtime::tls::publish_backend(s);
            }
        }
        let c = &sh.counters;
        c.set(Main::uptime, sh.started.elapsed().as_secs());
        let m = &sh.mgt;
        self.mgt.set(Mgt::uptime, sh.started.elapsed().as_secs());
        self.mgt
            .set(Mgt::child_start, m.child_start.load(Ordering::Relaxed));
        self.mgt
            .set(Mgt::child_panic, m.child_panic.load(Ordering::Relaxed));
        // Lacquer runs on async tasks, not thread pools; the pool gauges
        // report the configured shape (pools of thread_pool_min workers)
        // so tools and tests reading them see what varnishd would keep.
        {
            let p = sh.params();
            let pools = p.uint("thread_pools");
            c.set(Main::pools, pools);
            c.set(Main::threads, pools * p.uint("thread_pool_min"));
        }
        let cs = sh.cache.stats();
        let g = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        c.set(Main::n_object, g(&cs.n_object));
        c.set(Main::n_objectcore, g(&cs.n_objectcore));
        c.set(Main::n_objecthead, g(&cs.n_objecthead));
        c.set(Main::hcb_nolock, g(&cs.hcb_nolock));
        c.set(Main::hcb_lock, g(&cs.hcb_lock));
        c.set(Main::hcb_insert, g(&cs.hcb_insert));
        c.set(Main::exp_mailed, g(&cs.exp_mailed));
        c.set(Main::exp_received, g(&cs.exp_mailed));
        c.set(Main::n_expired, g(&cs.n_expired));
        c.set(Main::n_lru_nuked, g(&cs.n_lru_nuked));
        c.set(Main::n_lru_moved, g(&cs.n_lru_moved));
        c.set(Main::n_lru_limited, g(&cs.n_lru_limited));
        c.set(Main::n_purges, g(&cs.n_purges));
        c.set(Main::n_obj_purged, g(&cs.n_obj_purged));
        c.set(Main::busy_sleep, g(&cs.busy_sleep));
        c.set(Main::busy_wakeup, g(&cs.busy_wakeup));
        c.set(Main::bans, g(&cs.bans));
        c.set(Main::bans_completed, g(&cs.bans_completed));
        c.set(Main::bans_obj, g(&cs.bans_obj));
        c.set(Main::bans_req, g(&cs.bans_req));
        c.set(Main::bans_added, g(&cs.bans_added));
        c.set(Main::bans_deleted, g(&cs.bans_deleted));
        c.set(Main::bans_tested, g(&cs.bans_tested));
        c.set(Main::bans_obj_killed, g(&cs.bans_obj_killed));
        c.set(Main::bans_lurker_tested, g(&cs.bans_lurker_tested));
        c.set(Main::bans_tests_tested, g(&cs.bans_tests_tested));
        c.set(
            Main::bans_lurker_tests_tested,
            g(&cs.bans_lurker_tests_tested),
        );
        c.set(Main::bans_lurker_obj_killed, g(&cs.bans_lurker_obj_killed));
        c.set(
            Main::bans_lurker_obj_killed_cutoff,
            g(&cs.bans_lurker_obj_killed_cutoff),
        );
        c.set(Main::bans_dups, g(&cs.bans_dups));
        for (store, sec) in sh.stores.iter().zip(&self.sma) {
            let st = store.stats();
            if let Some(f) = store.file_stats() {
                sec.set(Smf::c_req, g(&st.c_req));
                sec.set(Smf::c_fail, g(&st.c_fail));
                sec.set(Smf::c_bytes, g(&st.c_bytes));
                sec.set(Smf::c_freed, g(&st.c_freed));
                sec.set(Smf::g_alloc, g(&st.g_alloc));
                sec.set(Smf::g_bytes, g(&st.g_bytes));
                sec.set(Smf::g_space, g(&st.g_space));
                sec.set(Smf::g_smf, g(&f.g_smf));
                sec.set(Smf::g_smf_frag, g(&f.g_smf_frag));
                sec.set(Smf::g_smf_large, g(&f.g_smf_large));
            } else {
                sec.set(Sma::c_req, g(&st.c_req));
                sec.set(Sma::c_fail, g(&st.c_fail));
                sec.set(Sma::c_bytes, g(&st.c_bytes));
                sec.set(Sma::c_freed, g(&st.c_freed));
                sec.set(Sma::g_alloc, g(&st.g_alloc));
                sec.set(Sma::g_bytes, g(&st.g_bytes));
                sec.set(Sma::g_space, g(&st.g_space));
            }
        }
        for (i, sec) in &self.mse {
            let Some(d) = sh.stores.get(*i).and_then(|s| s.disk()) else {
                continue;
            };
            let m = d.disk_stats();
            sec.set(Mse::recovered, g(&m.recovered));
            sec.set(Mse::recovered_bytes, g(&m.recovered_bytes));
            sec.set(Mse::recovery_us, g(&m.recovery_us));
            sec.set(Mse::scanned_bytes, g(&m.scanned_bytes));
            sec.set(Mse::dropped_damaged, g(&m.dropped_damaged));
            sec.set(Mse::dropped_conflict, g(&m.dropped_conflict));
            sec.set(Mse::dropped_stale, g(&m.dropped_stale));
            sec.set(Mse::records, g(&m.records));
            sec.set(Mse::record_failures, g(&m.record_failures));
            sec.set(Mse::journal_entries, g(&m.journal_entries));
            sec.set(Mse::journal_failures, g(&m.journal_failures));
            sec.set(Mse::syncs, g(&m.syncs));
            sec.set(Mse::verified, g(&m.verified));
            sec.set(Mse::verify_failures, g(&m.verify_failures));
            sec.set(Mse::indexed, g(&m.indexed));
            sec.set(Mse::index_bytes, g(&m.index_bytes));
            sec.set(Mse::materialized, g(&m.materialized));
            sec.set(Mse::index_evicted, g(&m.index_evicted));
        }
        // Lacquer has no per-pool allocators: what is alive is counted in
        // the first pool's sections, the others stay at zero.
        if let Some((req, sess)) = self.mempool.first() {
            req.set(
                Mempool::live,
                crate::runtime::task::LIVE_REQS.load(Ordering::Relaxed),
            );
            sess.set(Mempool::live, crate::runtime::counters::live_sessions());
        }
        self.publish_backends(sh);
        let lck = &crate::backend::pool::CONN_POOL_LOCKS;
        self.lck_conn_pool.set(Lck::creat, g(&lck.creat));
        self.lck_conn_pool.set(Lck::destroy, g(&lck.destroy));
        self.lck_conn_pool.set(Lck::locks, g(&lck.locks));
    }

    fn publish_backends(&self, sh: &Shared) {
        let mut vbe = self.vbe.lock().unwrap_or_else(|e| e.into_inner());
        let reg = sh.vcls.lock().unwrap_or_else(|e| e.into_inner());
        // Backends of every VCL still loaded count in n_backend (a
        // discarded one until its last request is gone); only those of
        // warm VCLs have VBE counters, as varnishd's.
        let mut n_backend = 0u64;
        let mut warm = Vec::new();
        for vcl in reg.vcls.values().map(|e| &e.vcl).chain(&reg.discarded) {
            let all = vcl.all_backends();
            n_backend += all.iter().filter(|b| !b.none).count() as u64;
            if vcl.is_warm() {
                warm.extend(all);
            }
        }
        let (avail, discarded) = (reg.vcls.len() as u64, reg.discarded.len() as u64);
        let vmods = reg.vmods().len() as u64;
        drop(reg);
        let c = &sh.counters;
        c.set(Main::vmods, vmods);
        c.set(Main::n_backend, n_backend);
        c.set(Main::n_vcl, avail + discarded);
        c.set(Main::n_vcl_avail, avail);
        c.set(Main::n_vcl_discard, discarded);
        // Sections of backends that went away or went cold are removed
        // (dropping them).
        vbe.retain(|(w, _)| {
            w.upgrade()
                .is_some_and(|x| warm.iter().any(|b| Arc::ptr_eq(&x, b)))
        });
        for b in &warm {
            let known = vbe
                .iter()
                .any(|(w, _)| w.upgrade().is_some_and(|x| Arc::ptr_eq(&x, b)));
            if !known && let Ok(sec) = self.vsc.add_section(&VBE, &format!("VBE.{}", b.name)) {
                vbe.push((Arc::downgrade(b), sec));
            }
        }
        for (w, sec) in vbe.iter() {
            let Some(b) = w.upgrade() else { continue };
            let ps = &b.pool.stats;
            let g = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
            sec.set(Vbe::happy, b.health.happy_bits());
            sec.set(Vbe::conn, b.pool.open_connections() as u64);
            sec.set(Vbe::req, g(&ps.opened) + g(&ps.reused));
            sec.set(Vbe::fail, g(&ps.fail));
            sec.set(Vbe::fail_eacces, g(&ps.fail_eacces));
            sec.set(Vbe::fail_eaddrnotavail, g(&ps.fail_eaddrnotavail));
            sec.set(Vbe::fail_econnrefused, g(&ps.fail_econnrefused));
            sec.set(Vbe::fail_enetunreach, g(&ps.fail_enetunreach));
            sec.set(Vbe::fail_etimedout, g(&ps.fail_etimedout));
            sec.set(Vbe::fail_other, g(&ps.fail_other));
            sec.set(Vbe::busy, g(&ps.busy));
            sec.set(Vbe::helddown, g(&ps.helddown));
            sec.set(Vbe::unhealthy, g(&ps.unhealthy));
            sec.set(Vbe::bereq_hdrbytes, g(&ps.bereq_hdrbytes));
            sec.set(Vbe::pipe_hdrbytes, g(&ps.pipe_hdrbytes));
            sec.set(Vbe::pipe_out, g(&ps.pipe_out));
            sec.set(Vbe::pipe_in, g(&ps.pipe_in));
            sec.set(Vbe::bereq_bodybytes, g(&ps.bereq_bodybytes));
            sec.set(Vbe::beresp_hdrbytes, g(&ps.beresp_hdrbytes));
            sec.set(Vbe::beresp_bodybytes, g(&ps.beresp_bodybytes));
        }
    }
}
