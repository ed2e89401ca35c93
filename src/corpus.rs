//! A workload generator: realistic audit streams at any scale, deterministic from a seed.
//! N namespaces × M Deployment trees (Deployment → ReplicaSet → Pods) and Crossplane-style
//! trees (XR → managed resources), driven through the simulated API server: rollouts, image
//! changes, hand edits, HPA scaling, controller resyncs (drift), pod churn, deletions.

use std::io::{self, Write};

use serde_json::json;

use crate::sim::*;

/// What [`generate`] writes: how much, of how many trees, from which seed.
#[derive(Clone, Debug)]
pub struct CorpusOptions {
    /// The seed: the same options give the same stream.
    pub seed: u64,
    /// Namespaces, each with its own Deployment trees.
    pub namespaces: usize,
    /// Deployment trees per namespace.
    pub deployments_per_namespace: usize,
    /// Stop after this many events.
    pub events: usize,
    /// Write `managedFields` into objects (as without `omitManagedFields`).
    pub managed_fields: bool,
    /// Write EventLists of this many events instead of JSON lines (0: JSON lines).
    pub event_list_size: usize,
    /// Delete every tree at the end of each round (false: objects stay live, e.g. to measure
    /// memory per tracked object).
    pub teardown: bool,
}

impl Default for CorpusOptions {
    fn default() -> Self {
        CorpusOptions {
            seed: 1,
            namespaces: 10,
            deployments_per_namespace: 10,
            events: 100_000,
            managed_fields: false,
            event_list_size: 0,
            teardown: true,
        }
    }
}

/// xorshift64*: small, fast, deterministic.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    /// `n` characters of the alphabet Kubernetes uses for generated name suffixes (a
    /// ReplicaSet's pod-template-hash, a Pod's random suffix).
    fn suffix(&mut self, n: usize) -> String {
        const SAFE: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        (0..n).map(|_| SAFE[self.below(SAFE.len())] as char).collect()
    }
}

/// Deployment names as a cluster has them: service and role, 10–24 characters with the index.
const SERVICES: [&str; 10] =
    ["checkout", "payments", "inventory", "search", "catalog", "billing", "auth", "orders", "shipping", "reviews"];
const ROLES: [&str; 5] = ["api", "worker", "web", "gateway", "consumer"];

struct Tree {
    deploy: ObjRef,
    rs: ObjRef,
    pods: Vec<ObjRef>,
    image: u32,
    replicas: i64,
}

struct Writer<'a> {
    out: &'a mut dyn Write,
    list_size: usize,
    pending: Vec<String>,
    written: usize,
    /// Events past this are dropped, so the corpus has exactly the size asked for.
    limit: usize,
}

impl Writer<'_> {
    fn push(&mut self, ev: String) -> io::Result<()> {
        if self.written >= self.limit {
            return Ok(());
        }
        self.written += 1;
        if self.list_size == 0 {
            self.out.write_all(ev.as_bytes())?;
            return self.out.write_all(b"\n");
        }
        self.pending.push(ev);
        if self.pending.len() >= self.list_size {
            self.flush()?;
        }
        Ok(())
    }
    fn flush(&mut self) -> io::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        writeln!(
            self.out,
            "{{\"kind\":\"EventList\",\"apiVersion\":\"audit.k8s.io/v1\",\"metadata\":{{}},\"items\":[{}]}}",
            self.pending.join(",")
        )?;
        self.pending.clear();
        Ok(())
    }
}

/// Writes a corpus to `out`; returns the number of events written.
pub fn generate(opts: &CorpusOptions, out: &mut dyn Write) -> io::Result<usize> {
    let mut rng = Rng(opts.seed.max(1).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let mut api = ApiServer::new();
    api.managed_fields = opts.managed_fields;
    let mut w = Writer { out, list_size: opts.event_list_size, pending: Vec::new(), written: 0, limit: opts.events };
    let mut trees: Vec<Tree> = Vec::new();
    let mut generation = 0u32;
    while w.written < opts.events {
        // (Re)build every tree: a rollout to a stable state.
        for ns in 0..opts.namespaces {
            for d in 0..opts.deployments_per_namespace {
                if w.written >= opts.events {
                    break;
                }
                let service = SERVICES[d % SERVICES.len()];
                let role = ROLES[d / SERVICES.len() % ROLES.len()];
                // Trees of a later round (no teardown) beside those of the first.
                let name = match generation {
                    0 => format!("{service}-{role}-{d}"),
                    g => format!("{service}-{role}-{d}-{g}"),
                };
                let namespace = format!("team-{ns}");
                let replicas = 1 + rng.below(3) as i64;
                let mut spec = deployment(&namespace, &name, replicas, "registry.example/app:1");
                spec["metadata"]["annotations"] = json!({"kausality.io/trace-team": format!("team-{ns}")});
                let (deploy, e) = api.create(ADMIN, spec);
                w.push(e)?;
                let (rs, e) = api.create(
                    DEPLOYMENT_CONTROLLER,
                    replicaset(&deploy, &rng.suffix(10), replicas, "registry.example/app:1"),
                );
                w.push(e)?;
                w.push(api.report(DEPLOYMENT_CONTROLLER, &deploy, &[("Progressing", "True"), ("Available", "False")]))?;
                let mut pods = Vec::new();
                for _ in 0..replicas {
                    let (pr, e) = api.create(REPLICASET_CONTROLLER, pod(&rs, &rng.suffix(5), "registry.example/app:1"));
                    pods.push(pr);
                    w.push(e)?;
                }
                w.push(api.report(REPLICASET_CONTROLLER, &rs, &[]))?;
                w.push(api.report(DEPLOYMENT_CONTROLLER, &deploy, &[("Progressing", "True"), ("Available", "True")]))?;
                trees.push(Tree { deploy, rs, pods, image: 1, replicas });
            }
        }
        // Day-to-day life of the trees.
        let rounds = trees.len() * 4;
        for _ in 0..rounds {
            if w.written >= opts.events || trees.is_empty() {
                break;
            }
            let i = rng.below(trees.len());
            let t = &mut trees[i];
            api.advance_ms(rng.below(20) as i64);
            match rng.below(10) {
                // Image change: expected work for the controller.
                0 | 1 => {
                    t.image += 1;
                    let image = format!("registry.example/app:{}", t.image);
                    let img = image.clone();
                    w.push(api.update(ADMIN, &t.deploy, move |d| {
                        d["spec"]["template"]["spec"]["containers"][0]["image"] = json!(img)
                    }))?;
                    let reps = t.replicas;
                    w.push(api.update(DEPLOYMENT_CONTROLLER, &t.rs, move |r| {
                        r["spec"]["template"]["spec"]["containers"][0]["image"] = json!(image)
                    }))?;
                    w.push(api.update(DEPLOYMENT_CONTROLLER, &t.rs, move |r| r["spec"]["replicas"] = json!(reps)))?;
                    w.push(api.report(DEPLOYMENT_CONTROLLER, &t.deploy, &[("Available", "True")]))?;
                }
                // A person scales the ReplicaSet by hand; the controller reverts (drift).
                2 => {
                    let hand = t.replicas + 2;
                    w.push(api.update("alice@example.com", &t.rs, move |r| r["spec"]["replicas"] = json!(hand)))?;
                    let reps = t.replicas;
                    w.push(api.update(DEPLOYMENT_CONTROLLER, &t.rs, move |r| r["spec"]["replicas"] = json!(reps)))?;
                }
                // HPA scales through /scale; the controller follows.
                3 => {
                    t.replicas = 1 + rng.below(5) as i64;
                    w.push(api.scale(HPA, &t.deploy, t.replicas))?;
                    let reps = t.replicas;
                    w.push(api.update(DEPLOYMENT_CONTROLLER, &t.rs, move |r| r["spec"]["replicas"] = json!(reps)))?;
                    w.push(api.report(DEPLOYMENT_CONTROLLER, &t.deploy, &[("Available", "True")]))?;
                }
                // Pod churn: a pod is deleted, the ReplicaSet controller replaces it.
                4 | 5 => {
                    if !t.pods.is_empty() {
                        let victim = t.pods.remove(rng.below(t.pods.len()));
                        w.push(api.delete("system:node:worker-1", &victim, &[]))?;
                        let (pr, e) =
                            api.create(REPLICASET_CONTROLLER, pod(&t.rs, &rng.suffix(5), "registry.example/app:1"));
                        t.pods.push(pr);
                        w.push(e)?;
                    }
                }
                // Status-only resyncs: feed state, not classified.
                6 | 7 => {
                    w.push(api.report(REPLICASET_CONTROLLER, &t.rs, &[]))?;
                    w.push(api.report(DEPLOYMENT_CONTROLLER, &t.deploy, &[("Available", "True")]))?;
                }
                // A controller resync that changes a child on its own: drift.
                8 => {
                    let v = rng.next() % 1000;
                    w.push(api.update(DEPLOYMENT_CONTROLLER, &t.rs, move |r| r["spec"]["minReadySeconds"] = json!(v)))?;
                }
                // A no-op update (same resourceVersion).
                _ => w.push(api.update(DEPLOYMENT_CONTROLLER, &t.rs, |_| {}))?,
            }
        }
        if !opts.teardown {
            // Keep the trees: the next round builds new ones beside them.
            trees.clear();
            generation += 1;
            continue;
        }
        // Tear down: background deletion, the garbage collector removes the children.
        for t in trees.drain(..) {
            if w.written >= opts.events {
                break;
            }
            w.push(api.delete(ADMIN, &t.deploy, &[]))?;
            w.push(api.delete(GARBAGE_COLLECTOR, &t.rs, &[]))?;
            for p in &t.pods {
                w.push(api.delete(GARBAGE_COLLECTOR, p, &[]))?;
            }
        }
        generation += 1;
    }
    w.flush()?;
    Ok(w.written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_sized() {
        let opts = CorpusOptions { events: 500, namespaces: 2, deployments_per_namespace: 3, ..Default::default() };
        let (mut a, mut b) = (Vec::new(), Vec::new());
        assert_eq!(generate(&opts, &mut a).unwrap(), 500);
        generate(&opts, &mut b).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.iter().filter(|&&c| c == b'\n').count(), 500);
        let mut lists = Vec::new();
        generate(&CorpusOptions { event_list_size: 100, ..opts }, &mut lists).unwrap();
        assert_eq!(lists.iter().filter(|&&c| c == b'\n').count(), 5);
    }
}
