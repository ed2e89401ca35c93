//! What a write puts back outside a controller's drift (DESIGN §1.8): any write that returns
//! fields to their value before another actor's write names it, on the top of a tree too; two
//! actors putting back each other's put-backs are fighting.

use super::*;
use crate::state::Sym;

impl Reverted {
    /// The fields it returned to their value before the write undone.
    pub(super) fn restored(&self) -> impl Iterator<Item = &FieldChange> {
        self.fields.iter().flatten().filter(|(_, restored)| *restored).map(|(f, _)| f)
    }
}

/// The writes by others than `user` that a write of `user` leaving `now` puts back (DESIGN
/// §1.8: it returns a field to its value before them), taken out of `writes`; the rest stand.
/// Writes older than `since_us` are dropped.
pub(in crate::classify) fn put_back(
    writes: &[OriginWrite],
    now: &Now,
    user: Sym,
    since_us: i64,
) -> (Vec<Reverted>, Vec<OriginWrite>) {
    let (mut reverted, mut standing) = (Vec::new(), Vec::new());
    for w in writes.iter().filter(|w| w.time_us >= since_us) {
        let overwritten: Vec<(FieldChange, bool)> = w
            .fields
            .iter()
            .flatten()
            .filter_map(|f| {
                let value = now.value(&f.path)?;
                (value != f.after).then(|| (f.clone(), value == f.before))
            })
            .collect();
        if w.user != user && overwritten.iter().any(|(_, restored)| *restored) {
            reverted.push(Reverted { fight: w.reverted == Some(user), write: w.clone(), fields: Some(overwritten) });
        } else {
            standing.push(w.clone());
        }
    }
    (reverted, standing)
}

/// Whether a write leaving `now` changes every field that `w` set (known fields only).
fn superseded(w: &OriginWrite, now: &Leaving<'_>) -> bool {
    w.fields.as_deref().is_some_and(|fields| {
        !fields.is_empty() && fields.iter().all(|f| now.now().value(&f.path).is_some_and(|v| v != f.after))
    })
}

/// The path of a field as the fights metric names it: a closed set (STYLE 16).
pub fn field_label(path: &str) -> &'static str {
    const EXACT: [&str; 4] = ["spec.replicas", "spec.paused", "spec.suspend", "spec.schedule"];
    if let Some(p) = EXACT.iter().find(|p| **p == path) {
        return p;
    }
    for (prefix, label) in [
        ("spec.template.", "spec.template"),
        ("spec.selector", "spec.selector"),
        ("spec.resources", "spec.resources"),
        ("data.", "data"),
        ("binaryData.", "data"),
        ("spec.values", "spec.values"),
    ] {
        if path.starts_with(prefix) {
            return label;
        }
    }
    "other"
}

impl Engine {
    /// The writes to the object `key` by others than `user` that a write of `user` leaving
    /// `now` puts back, and what stands of its origin writes when it took any out (`None`:
    /// none taken out, nothing to change).
    pub(super) fn put_back_at(
        &self,
        key: ObjKey,
        now: &Leaving<'_>,
        user: Sym,
        time_us: i64,
    ) -> (Vec<Reverted>, Option<Vec<OriginWrite>>) {
        let writes = self.store.read(&key, |c| c.origin_writes().to_vec()).unwrap_or_default();
        if writes.is_empty() {
            return (Vec::new(), None);
        }
        let (found, standing) = put_back(&writes, now.now(), user, self.revert_since(time_us));
        let changed = !found.is_empty() || standing.len() != writes.len();
        (found, changed.then_some(standing))
    }

    /// DESIGN §1.8 for a write to the top of a tree (no controller, no applier): it names the
    /// writes of others whose fields it returns to their value before them, and is kept as an
    /// origin write in turn (when its fields are known), so that who puts it back names it.
    pub(in crate::classify) fn track_top_level(&self, w: &Write, child: &Child<'_>) -> Option<Vec<RevertOut>> {
        let key = ObjKey::new(w.scope, child.uid);
        let removes = removes(w);
        let (before, after) = self.contents_at(key, child.written, removes);
        // A write that leaves the content as it was (a status write, a no-op apply) changes no
        // field, so it puts nothing back and overwrites none of its user's earlier writes: the
        // content is not parsed at all.
        if let (Some(b), After::Text(a)) = (&before, &after) {
            if b == a {
                return None;
            }
        }
        // Nobody's writes kept on it, and nothing known of it before (a create, a first write
        // seen) or nothing after (a delete): it names no field and puts nothing back, so
        // neither content is parsed.
        let writes = self.store.read(&key, |c| c.origin_writes().to_vec()).unwrap_or_default();
        if (before.is_none() || removes) && writes.is_empty() {
            return None;
        }
        let now = Leaving::new(&after);
        let (found, mut kept) = match writes.is_empty() {
            true => (Vec::new(), Vec::new()),
            false => put_back(&writes, now.now(), w.user, self.revert_since(w.time_us)),
        };
        // Its own earlier writes that this one overwrites in every field are done with: an
        // object one user keeps writing (a lease renewed) keeps one write, not four.
        kept.retain(|o| o.user != w.user || !superseded(o, &now));
        let standing = (!found.is_empty() || kept.len() != writes.len()).then_some(kept);
        let fields = if removes { None } else { changed_fields(before.as_deref(), &after).filter(|f| !f.is_empty()) };
        if standing.is_some() || fields.is_some() {
            let origin = fields.map(|fields| origin_write(w, child, Some(fields), found.first().map(|r| r.write.user)));
            self.store.update(&key, |c| {
                if let Some(standing) = standing {
                    c.set_origin_writes(standing);
                }
                if let Some(origin) = origin {
                    c.push_origin_write(origin);
                }
            });
        }
        (!found.is_empty()).then(|| found.into_iter().map(|r| self.revert_out(r)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_labels_are_a_closed_set() {
        for (path, label) in [
            ("spec.replicas", "spec.replicas"),
            ("spec.template.spec.containers[0].image", "spec.template"),
            ("data.mode", "data"),
            ("binaryData.cert", "data"),
            ("spec.values.image.tag", "spec.values"),
            ("spec.replicasX", "other"),
            ("metadata.labels.team", "other"),
            ("", "other"),
        ] {
            assert_eq!(field_label(path), label, "{path}");
        }
    }
}
