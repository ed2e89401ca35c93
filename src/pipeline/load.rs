//! Reading a pipeline file. Each section (and each source and sink) is decoded on its own, so
//! one bad key does not hide the next: every problem in the file comes back at once, each
//! naming the file, line, key and what is wrong. Then the semantic checks (paths, listeners,
//! TLS) run over whatever decoded.

use std::path::Path;

use serde::de::DeserializeOwned;
use toml::de::{DeTable, DeValue, ValueDeserializer};
use toml::Spanned;

use super::config::{InProgressConfig, MetricsConfig, Options, PipelineConfig, PolicyConfig, ScopeConfig, StateConfig};
use crate::config::progress::{Comparison, ConditionReason};
use crate::scope::LabelSelector;
use crate::shell::{ConfigError, ConfigErrors, Errors, UnknownParentsConfig};
use crate::sinks::SinkConfig;
use crate::sources::SourceConfig;

/// Reads and checks a pipeline file.
pub fn load_file(path: &Path) -> Result<PipelineConfig, ConfigErrors> {
    let (name, text) = read(path)?;
    load_str(&name, &text)
}

/// The name `path` has in errors, and its text.
fn read(path: &Path) -> Result<(String, String), ConfigErrors> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| {
        ConfigErrors(vec![ConfigError {
            file: name.clone(),
            line: None,
            key: String::new(),
            message: format!("cannot read: {e}"),
        }])
    })?;
    Ok((name, text))
}

/// Decodes and checks pipeline text; `file` names it in errors.
pub fn load_str(file: &str, text: &str) -> Result<PipelineConfig, ConfigErrors> {
    let mut errors = Errors::new(file, text);
    let root = match DeTable::parse(text) {
        Ok(t) => t,
        Err(e) => {
            errors.push_toml("", e, 0);
            return Err(ConfigErrors(errors.list));
        }
    };
    let mut cfg = PipelineConfig {
        cluster: "default".to_string(),
        options: Options::default(),
        scope: ScopeConfig::default(),
        ignore: Vec::new(),
        lifecycle: Vec::new(),
        in_progress: Vec::new(),
        sensitive: Vec::new(),
        policies: Vec::new(),
        appliers: Vec::new(),
        sources: Vec::new(),
        sinks: Vec::new(),
        metrics: MetricsConfig::default(),
        state: StateConfig::default(),
        unknown_parents: UnknownParentsConfig::default(),
        query: None,
    };
    let mut has_sources = false;
    let mut idx = Indices::default();
    for (key, value) in root.into_inner() {
        let at = key.span().start;
        let k: &str = key.get_ref();
        errors.anchor(k.to_string(), at);
        has_sources |= k == "sources";
        match k {
            "cluster" => decode(&mut errors, k, value).map(|v| cfg.cluster = v),
            "options" => decode_section(&mut errors, k, value).map(|v| cfg.options = v),
            "scope" => decode_section(&mut errors, k, value).map(|v| cfg.scope = v),
            "ignore" => decode_each(&mut errors, k, value).map(|v| (idx.ignore, cfg.ignore) = v.into_iter().unzip()),
            "lifecycle" => {
                decode_each(&mut errors, k, value).map(|v| (idx.lifecycle, cfg.lifecycle) = v.into_iter().unzip())
            }
            "in_progress" => {
                decode_each(&mut errors, k, value).map(|v| (idx.in_progress, cfg.in_progress) = v.into_iter().unzip())
            }
            "sensitive" => {
                decode_each(&mut errors, k, value).map(|v| (idx.sensitive, cfg.sensitive) = v.into_iter().unzip())
            }
            "policy" => {
                decode_each(&mut errors, k, value).map(|v| (idx.policies, cfg.policies) = v.into_iter().unzip())
            }
            "applier" => {
                decode_each(&mut errors, k, value).map(|v| (idx.appliers, cfg.appliers) = v.into_iter().unzip())
            }
            "sources" => decode_each(&mut errors, k, value).map(|v| (idx.sources, cfg.sources) = v.into_iter().unzip()),
            "sinks" => decode_each(&mut errors, k, value).map(|v| (idx.sinks, cfg.sinks) = v.into_iter().unzip()),
            "metrics" => decode_section(&mut errors, k, value).map(|v| cfg.metrics = v),
            "state" => decode_section(&mut errors, k, value).map(|v| cfg.state = v),
            "unknown_parents" => decode_section(&mut errors, k, value).map(|v| cfg.unknown_parents = v),
            "query" => decode_section(&mut errors, k, value).map(|v| cfg.query = Some(v)),
            other => {
                errors.push(
                    other,
                    Some(at),
                    "unknown key; expected one of cluster, options, scope, ignore, lifecycle, in_progress, sensitive, policy, applier, sources, sinks, metrics, state, unknown_parents, query",
                );
                None
            }
        };
    }
    check(&cfg, has_sources, &idx, &mut errors);
    if errors.list.is_empty() {
        Ok(cfg)
    } else {
        errors.list.sort_by_key(|e| e.line.unwrap_or(usize::MAX));
        Err(ConfigErrors(errors.list))
    }
}

fn decode<T: DeserializeOwned>(errors: &mut Errors<'_>, key: &str, value: Spanned<DeValue<'_>>) -> Option<T> {
    let at = value.span().start;
    T::deserialize(ValueDeserializer::from(value)).map_err(|e| errors.push_toml(key, e, at)).ok()
}

/// Decodes a table whose every key has a default (`[options]`, `[state]`, ...): when the whole
/// table does not decode, each key is tried alone so that every bad key is reported, and the
/// good keys are kept so that the checks after decoding still see them.
fn decode_section<T: DeserializeOwned>(errors: &mut Errors<'_>, key: &str, value: Spanned<DeValue<'_>>) -> Option<T> {
    let span = value.span();
    let DeValue::Table(table) = value.get_ref() else { return decode(errors, key, value) };
    if let Ok(v) = T::deserialize(ValueDeserializer::from(value.clone())) {
        return Some(v);
    }
    let mut good = DeTable::new();
    for (k, v) in table.iter() {
        let mut alone = DeTable::new();
        alone.insert(k.clone(), v.clone());
        match T::deserialize(ValueDeserializer::from(Spanned::new(span.clone(), DeValue::Table(alone)))) {
            Ok(_) => {
                good.insert(k.clone(), v.clone());
            }
            Err(e) => errors.push_toml(key, e, k.span().start),
        }
    }
    T::deserialize(ValueDeserializer::from(Spanned::new(span, DeValue::Table(good)))).ok()
}

/// Decodes an array of tables item by item, so one bad item does not hide the others; the
/// good items are kept so that their own checks still run.
fn decode_each<T: DeserializeOwned>(
    errors: &mut Errors<'_>,
    key: &str,
    value: Spanned<DeValue<'_>>,
) -> Option<Vec<(usize, T)>> {
    let at = value.span().start;
    let DeValue::Array(items) = value.into_inner() else {
        errors.push(key, Some(at), format!("must be an array of tables ([[{key}]])"));
        return None;
    };
    let mut out = Vec::new();
    for (i, item) in items.into_iter().enumerate() {
        let item_key = format!("{key}[{i}]");
        errors.anchor(item_key.clone(), item.span().start);
        // Its own tables too (`[sources.changelog]`): a mistake in one names its line.
        if let DeValue::Table(t) = item.get_ref() {
            for (k, v) in t.iter() {
                if matches!(v.get_ref(), DeValue::Table(_)) {
                    errors.anchor(format!("{item_key}.{}", k.get_ref()), k.span().start);
                }
            }
        }
        if let Some(v) = decode(errors, &item_key, item) {
            out.push((i, v));
        }
    }
    Some(out)
}

/// The position in the file of each decoded array item (a bad item leaves a gap), so that
/// errors name the item as the file numbers it.
#[derive(Default)]
struct Indices {
    ignore: Vec<usize>,
    lifecycle: Vec<usize>,
    in_progress: Vec<usize>,
    sensitive: Vec<usize>,
    policies: Vec<usize>,
    appliers: Vec<usize>,
    sources: Vec<usize>,
    sinks: Vec<usize>,
}

/// The checks that need more than one field, or the file system.
fn check(cfg: &PipelineConfig, has_sources: bool, idx: &Indices, errors: &mut Errors<'_>) {
    if cfg.cluster.trim().is_empty() {
        errors.push("cluster", None, "must not be empty");
    }
    let o = &cfg.options;
    for (key, v) in [
        ("options.max_objects", o.max_objects),
        ("options.dedupe_capacity", o.dedupe_capacity),
        ("options.queue_capacity", o.queue_capacity),
        ("options.sink_queue_capacity", o.sink_queue_capacity),
        ("options.reorder_max_held", o.reorder_max_held),
        ("options.max_clusters", o.max_clusters),
        ("options.max_record_bytes", o.max_record_bytes),
        ("options.revert_contents_max_entries", o.revert_contents_max_entries),
    ] {
        if v == 0 {
            errors.push(key, None, "must be at least 1");
        }
    }
    if !(2..=1024).contains(&o.max_trace_hops) {
        errors.push("options.max_trace_hops", None, "must be from 2 to 1024");
    }
    if o.tick_interval.0.is_zero() {
        errors.push("options.tick_interval", None, "must be more than 0");
    }
    if let Some(sel) = &cfg.scope.label_selector {
        if let Err(e) = LabelSelector::parse(sel) {
            errors.push("scope.label_selector", None, e);
        }
    }
    for (&i, ig) in idx.ignore.iter().zip(&cfg.ignore) {
        if ig.kind.is_empty() {
            errors.push(format!("ignore[{i}].kind"), None, "must name a kind, e.g. Deployment.apps");
        }
        for p in &ig.paths {
            if p.is_empty() || p.split('.').any(str::is_empty) {
                errors.push(
                    format!("ignore[{i}].paths"),
                    None,
                    format!("{p:?} is not a dotted field path like spec.replicas"),
                );
            }
        }
    }
    for (&i, sc) in idx.sensitive.iter().zip(&cfg.sensitive) {
        if sc.fields.is_empty() && sc.keys.is_empty() {
            errors.push(format!("sensitive[{i}]"), None, "names nothing: give `fields` (with `kind`) or `keys`");
        }
        match &sc.kind {
            Some(k) if k.is_empty() => {
                errors.push(format!("sensitive[{i}].kind"), None, "must name a kind, e.g. Secret or Widget.example.com")
            }
            None if !sc.fields.is_empty() => errors.push(
                format!("sensitive[{i}].kind"),
                None,
                "is required with `fields`: the kind whose fields they are",
            ),
            _ => {}
        }
        for p in &sc.fields {
            if p.is_empty() || p.split('.').any(str::is_empty) {
                errors.push(
                    format!("sensitive[{i}].fields"),
                    None,
                    format!("{p:?} is not a dotted field path like spec.credentials"),
                );
            }
        }
        for k in &sc.keys {
            if k.is_empty() || k.contains(['"', '.']) {
                errors.push(format!("sensitive[{i}].keys"), None, format!("{k:?} is not a field name like sshKey"));
            }
        }
    }
    for (&i, lc) in idx.lifecycle.iter().zip(&cfg.lifecycle) {
        if lc.signals.is_empty() {
            errors.push(format!("lifecycle[{i}].signals"), None, "must name at least one signal");
        }
    }
    for (&i, ip) in idx.in_progress.iter().zip(&cfg.in_progress) {
        check_in_progress(&format!("in_progress[{i}]"), ip, errors);
    }
    check_policies(&idx.policies, &cfg.policies, errors);
    check_appliers(&idx.appliers, &cfg.appliers, errors);
    if !has_sources {
        errors.push("sources", None, "no source: add a [[sources]] table (type = \"webhook\", \"kafka\" or \"file\")");
    }
    let mut listeners = vec![("metrics.listen".to_string(), cfg.metrics.listen)];
    for (&i, s) in idx.sources.iter().zip(&cfg.sources) {
        s.check(&format!("sources[{i}]"), errors);
        if let Some(addr) = s.listen() {
            listeners.push((format!("sources[{i}].listen"), addr));
        }
    }
    for (&i, s) in idx.sinks.iter().zip(&cfg.sinks) {
        s.check(&format!("sinks[{i}]"), errors);
    }
    if let Some(q) = &cfg.query {
        q.check("query", errors);
        listeners.push(("query.listen".to_string(), q.listen));
    }
    let sources: Vec<_> = idx.sources.iter().copied().zip(&cfg.sources).collect();
    check_exactly_once(&sources, &cfg.sinks, errors);
    let sinks: Vec<_> = idx.sinks.iter().copied().zip(&cfg.sinks).collect();
    let stateful = [
        ("state.snapshot", cfg.state.snapshot.is_some()),
        ("query", cfg.query.is_some()),
        ("unknown_parents.fetch", cfg.unknown_parents.fetch),
    ];
    let stateful: Vec<&str> = stateful.iter().filter(|(_, set)| *set).map(|(k, _)| *k).collect();
    check_ingest_tier(&sources, &sinks, &stateful, errors);
    for (i, (key, addr)) in listeners.iter().enumerate() {
        if addr.port() == 0 {
            continue;
        }
        if let Some((other, _)) = listeners[..i].iter().find(|(_, a)| a == addr) {
            errors.push(key.clone(), None, format!("{addr} is already used by {other}"));
        }
    }
    if let Some(dir) = cfg.state.snapshot.as_deref().and_then(Path::parent).filter(|d| !d.as_os_str().is_empty()) {
        if !dir.is_dir() {
            errors.push("state.snapshot", None, format!("directory {} does not exist", dir.display()));
        }
    }
    if cfg.state.snapshot_interval.0.is_zero() {
        errors.push("state.snapshot_interval", None, "must be more than 0");
    }
    let up = &cfg.unknown_parents;
    if up.fetch {
        if !cfg!(feature = "fetch") {
            errors.push("unknown_parents.fetch", None, "this binary was built without the `fetch` feature");
        }
        if !(up.rate > 0.0 && up.rate.is_finite()) {
            errors.push("unknown_parents.rate", None, "must be a positive number of fetches per second");
        }
        if up.cache_size == 0 {
            errors.push("unknown_parents.cache_size", None, "must be at least 1");
        }
        if let Some(k) = &up.kubeconfig {
            if !k.is_file() {
                errors.push("unknown_parents.kubeconfig", None, format!("{} is not a readable file", k.display()));
            }
        }
    }
}

/// An `[[in_progress]]` entry: a kind, and signals that parse.
fn check_in_progress(key: &str, ip: &InProgressConfig, errors: &mut Errors<'_>) {
    if ip.kind.is_empty() {
        errors.push(format!("{key}.kind"), None, "must name a kind, e.g. Widget.example.com");
    }
    for c in &ip.conditions {
        if let Err(e) = ConditionReason::parse(c) {
            errors.push(format!("{key}.conditions"), None, e);
        }
    }
    for f in &ip.fields {
        if let Err(e) = Comparison::parse(f) {
            errors.push(format!("{key}.fields"), None, e);
        }
    }
    for f in &ip.paused {
        if let Err(e) = Comparison::parse(f) {
            errors.push(format!("{key}.paused"), None, e);
        }
    }
    if ip.builtin && ip.conditions.is_empty() && ip.fields.is_empty() && ip.paused.is_empty() {
        errors.push(key, None, "names no signal: add conditions, fields or paused, or builtin = false to turn a native kind's built-in signals off");
    }
}

/// The checks of `[[policy]]` entries (`at`: their positions in the file): a name, unique and
/// not one of the annotations', kind keys and selectors that parse, and what `model_policies`
/// needs to accept them.
fn check_policies(at: &[usize], policies: &[PolicyConfig], errors: &mut Errors<'_>) {
    let mut names: Vec<(&str, usize)> = Vec::new();
    for (&i, p) in at.iter().zip(policies) {
        let key = format!("policy[{i}]");
        if p.name.trim().is_empty() {
            errors.push(format!("{key}.name"), None, "must not be empty");
        } else if p.name.starts_with("kausality.io/") {
            errors.push(
                format!("{key}.name"),
                None,
                format!("{:?}: kausality.io/ names the parent's annotations; choose another name", p.name),
            );
        } else if let Some((_, first)) = names.iter().find(|(n, _)| *n == p.name) {
            errors.push(format!("{key}.name"), None, format!("{:?} is already the name of policy[{first}]", p.name));
        } else {
            names.push((&p.name, i));
        }
        for (field, kinds) in [("parent_kinds", &p.parent_kinds), ("child_kinds", &p.child_kinds)] {
            for k in kinds {
                if k.is_empty() || k.contains('/') || k.contains(char::is_whitespace) {
                    errors.push(
                        format!("{key}.{field}"),
                        None,
                        format!("{k:?} is not a kind key like ReplicaSet.apps or Pod"),
                    );
                }
            }
        }
        for (field, list) in [("controllers", &p.controllers), ("namespaces", &p.namespaces)] {
            if list.iter().any(String::is_empty) {
                errors.push(format!("{key}.{field}"), None, "must not hold an empty string");
            }
        }
        if let Some(sel) = &p.parent_labels {
            if let Err(e) = LabelSelector::parse(sel) {
                errors.push(format!("{key}.parent_labels"), None, e);
            }
        }
    }
    if let Err(e) = model_policies(policies, &mut crate::config::ModelConfig::default()) {
        errors.push("policy", None, e);
    }
}

/// `[[applier]]` entries: each field as [`ApplierConfig::problems`] says, names unique and
/// not a built-in profile's, parent kinds not a built-in profile's.
///
/// [`ApplierConfig::problems`]: crate::config::appliers::ApplierConfig::problems
fn check_appliers(at: &[usize], appliers: &[crate::config::appliers::ApplierConfig], errors: &mut Errors<'_>) {
    let builtin = crate::config::appliers::builtin();
    let mut names: Vec<&str> = builtin.iter().map(|p| &*p.name).collect();
    for (&i, a) in at.iter().zip(appliers) {
        for (field, message) in a.problems() {
            errors.push(format!("applier[{i}].{field}"), None, message);
        }
        if names.contains(&a.name.as_str()) {
            errors.push(
                format!("applier[{i}].name"),
                None,
                format!(
                    "{:?} is taken (built-in profiles: flux-kustomize, flux-helm, argocd, sveltos); choose another",
                    a.name
                ),
            );
        }
        names.push(&a.name);
        if builtin.iter().any(|p| p.parent_kind == a.parent_kind) {
            errors.push(
                format!("applier[{i}].parent_kind"),
                None,
                format!("{} is a built-in profile's parent", a.parent_kind),
            );
        }
    }
}

/// Puts the checked appliers into the model's configuration.
pub fn model_appliers(appliers: &[crate::config::appliers::ApplierConfig], model: &mut crate::config::ModelConfig) {
    for a in appliers {
        model.appliers.profiles.push(a.profile());
    }
    crate::decode::keep_annotations(&model.appliers.annotation_keys());
}

/// Puts the checked policies into the model's configuration.
pub fn model_policies(policies: &[PolicyConfig], model: &mut crate::config::ModelConfig) -> Result<(), String> {
    for p in policies {
        let selector = p.parent_labels.as_deref().and_then(|s| LabelSelector::parse(s).ok());
        let policy = crate::config::PlatformPolicy {
            name: std::sync::Arc::from(p.name.as_str()),
            action: p.action,
            parent_kinds: p.parent_kinds.clone(),
            child_kinds: p.child_kinds.clone(),
            controllers: p.controllers.clone(),
            namespaces: p.namespaces.clone(),
            parent_selector: None,
            reverts_person: p.reverts_person,
        };
        model.add_policy(policy, selector)?;
    }
    Ok(())
}

/// Reads the `[[policy]]` entries of a pipeline file, or of a file that holds only policies
/// (`replay --policies`): the other keys of a pipeline are left unread, an unknown key is an
/// error, every policy is checked as `load` checks it.
pub fn load_policies(path: &Path) -> Result<Vec<PolicyConfig>, ConfigErrors> {
    let (name, text) = read(path)?;
    load_policies_str(&name, &text)
}

/// As [`load_policies`], of the text of `file`.
pub fn load_policies_str(file: &str, text: &str) -> Result<Vec<PolicyConfig>, ConfigErrors> {
    const PIPELINE_KEYS: &[&str] = &[
        "cluster",
        "options",
        "scope",
        "ignore",
        "lifecycle",
        "in_progress",
        "sensitive",
        "applier",
        "sources",
        "sinks",
        "metrics",
        "state",
        "unknown_parents",
    ];
    let mut errors = Errors::new(file, text);
    let root = DeTable::parse(text).map_err(|e| {
        errors.push_toml("", e, 0);
        ConfigErrors(errors.list.clone())
    })?;
    let (mut at, mut policies) = (Vec::new(), Vec::new());
    for (key, value) in root.into_inner() {
        let k: &str = key.get_ref();
        errors.anchor(k.to_string(), key.span().start);
        match k {
            "policy" => {
                if let Some(v) = decode_each(&mut errors, k, value) {
                    (at, policies) = v.into_iter().unzip();
                }
            }
            other if PIPELINE_KEYS.contains(&other) => {}
            other => errors.push(
                other,
                Some(key.span().start),
                "unknown key; a policy file holds [[policy]] tables (a pipeline file may hold the rest too)",
            ),
        }
    }
    check_policies(&at, &policies, &mut errors);
    if errors.list.is_empty() {
        Ok(policies)
    } else {
        errors.list.sort_by_key(|e| e.line.unwrap_or(usize::MAX));
        Err(ConfigErrors(errors.list))
    }
}

/// Checks across sources and sinks: exactly-once joins one Kafka source and one Kafka sink in
/// one transaction, so it needs exactly one of each.
fn check_exactly_once(sources: &[(usize, &SourceConfig)], sinks: &[SinkConfig], errors: &mut Errors<'_>) {
    let kafka_sources = sources.iter().filter(|(_, s)| matches!(s, SourceConfig::Kafka(_))).count();
    let kafka_sinks = sinks.iter().filter(|s| matches!(s, SinkConfig::Kafka(_))).count();
    for (i, s) in sources {
        let SourceConfig::Kafka(k) = s else { continue };
        if !k.exactly_once {
            continue;
        }
        if kafka_sinks != 1 {
            errors.push(
                format!("sources[{i}].exactly_once"),
                None,
                format!(
                    "needs exactly one [[sinks]] of type \"kafka\" (the transaction's producer), found {kafka_sinks}"
                ),
            );
        }
        if kafka_sources != 1 {
            errors.push(
                format!("sources[{i}].exactly_once"),
                None,
                "needs the Kafka source to be the pipeline's only one",
            );
        }
    }
}

/// What else the pipeline of a `kafka_route` sink holds: it is an ingest tier, so webhooks in,
/// this one sink out, and nothing that keeps state (a snapshot, the query API, fetches).
/// `sources` and `sinks` come with their index in the file; `stateful` names the keys set
/// that only a classifying pipeline uses.
fn check_ingest_tier(
    sources: &[(usize, &SourceConfig)],
    sinks: &[(usize, &SinkConfig)],
    stateful: &[&str],
    errors: &mut Errors<'_>,
) {
    let Some(&(at, _)) = sinks.iter().find(|(_, s)| matches!(s, SinkConfig::KafkaRoute(_))) else { return };
    if !cfg!(feature = "kafka") {
        errors.push(format!("sinks[{at}]"), None, "this binary was built without the `kafka` feature");
    }
    for (i, _) in sinks {
        if *i != at {
            errors.push(
                format!("sinks[{i}]"),
                None,
                format!("a pipeline with a kafka_route sink (sinks[{at}]) classifies nothing: it takes no other sink"),
            );
        }
    }
    for (i, s) in sources {
        if !matches!(s, SourceConfig::Webhook(_)) {
            errors.push(
                format!("sources[{i}]"),
                None,
                format!("a kafka_route sink (sinks[{at}]) takes webhook sources only, not {}", s.kind()),
            );
        }
    }
    for key in stateful {
        errors.push(*key, None, format!("a pipeline with a kafka_route sink (sinks[{at}]) keeps no state; remove it"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_shapes() {
        let cfg = load_str("t.toml", "[[sources]]\ntype = \"webhook\"\nplain_http = true\n").unwrap();
        assert_eq!(cfg.cluster, "default");
        assert_eq!(cfg.options.max_objects, 2_000_000);
        assert_eq!(cfg.sources.len(), 1);
    }

    #[test]
    fn every_error_at_once_with_file_line_and_key() {
        let text = r#"cluster = "c"
colour = "blue"
[options]
reorder_window = "fast"
dedupe_capacity = 0
[[sources]]
type = "webhook"
listen = "127.0.0.1:8080"
max_body_byte = 5
[[sources]]
type = "webhook"
listen = "127.0.0.1:8081"
[[sinks]]
type = "carrier-pigeon"
[scope]
label_selector = "app in (a)"
"#;
        let errs = load_str("bad.toml", text).unwrap_err().0;
        let shown: Vec<String> = errs.iter().map(ToString::to_string).collect();
        let all = shown.join("\n");
        assert!(all.contains("bad.toml:2: colour: unknown key"), "{all}");
        assert!(all.contains("bad.toml:4: options.reorder_window"), "{all}");
        assert!(all.contains("sources[0]") && all.contains("max_body_byte"), "{all}");
        assert!(all.contains("sources[1]: no [sources.tls]"), "{all}");
        assert!(all.contains("sinks[0]") && all.contains("carrier-pigeon"), "{all}");
        assert!(all.contains("scope.label_selector"), "{all}");
        assert!(
            all.contains("options.dedupe_capacity: must be at least 1"),
            "the rest of [options] is still checked: {all}"
        );
        assert!(errs.len() >= 6, "{all}");
    }

    #[test]
    fn sensitive_entries_add_to_the_defaults_and_are_checked() {
        let good = "[[sources]]\ntype = \"webhook\"\nplain_http = true\n[[sensitive]]\nkind = \"Cluster.example.com\"\nfields = [\"spec.credentials\"]\n[[sensitive]]\nkeys = [\"sshKey\"]\n";
        let model = super::super::build::model_config(&load_str("s.toml", good).unwrap());
        let redacted = model.sensitive.redact(
            "Cluster.example.com",
            r#"{"spec":{"credentials":{"k":"v1"},"n":[{"sshKey":"v2"}],"password":"v3"}}"#.into(),
        );
        assert!(!redacted.contains("v1") && !redacted.contains("v2") && !redacted.contains("v3"), "{redacted}");
        let kept = model.sensitive.redact("Secret", r#"{"data":{"k":"djQ="}}"#.into());
        assert!(!kept.contains("djQ="), "the defaults still hold: {kept}");
        let bad = "[[sources]]\ntype = \"webhook\"\nplain_http = true\n[[sensitive]]\nfields = [\"spec.a\"]\n[[sensitive]]\nkind = \"X\"\nfields = [\"spec..a\"]\nkeys = [\"a.b\"]\n[[sensitive]]\nkind = \"Y\"\n";
        let all = load_str("s.toml", bad).unwrap_err().0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n");
        assert!(all.contains("sensitive[0].kind: is required with `fields`"), "{all}");
        assert!(all.contains("sensitive[1].fields: \"spec..a\" is not a dotted field path"), "{all}");
        assert!(all.contains("sensitive[1].keys: \"a.b\" is not a field name"), "{all}");
        assert!(all.contains("sensitive[2]: names nothing"), "{all}");
    }

    #[test]
    fn in_progress_entries_are_checked_with_their_line() {
        let text = r#"[[sources]]
type = "webhook"
plain_http = true
[[in_progress]]
kind = "Widget.example.com"
conditions = ["Synced=Reconciling"]
fields = ["status.updatedReplicas != spec.replicas", "status.phase == Updating"]
[[in_progress]]
kind = "Deployment.apps"
builtin = false
[[in_progress]]
kind = "Gadget.example.com"
conditions = ["Synced"]
fields = ["phase == x", "status.a < Busy"]
[[in_progress]]
kind = ""
fields = ["status.a > 1"]
[[in_progress]]
kind = "Thing"
[[in_progress]]
kind = "Thing"
signal = "x"
"#;
        let errs = load_str("p.toml", text).unwrap_err().0;
        let all = errs.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n");
        assert!(
            all.contains("p.toml:11: in_progress[2].conditions: \"Synced\" is not a condition and reason"),
            "{all}"
        );
        assert!(all.contains("p.toml:11: in_progress[2].fields: \"phase == x\""), "{all}");
        assert!(
            all.contains("p.toml:11: in_progress[2].fields: \"status.a < Busy\": < compares numbers only"),
            "{all}"
        );
        assert!(all.contains("p.toml:15: in_progress[3].kind: must name a kind"), "{all}");
        assert!(all.contains("p.toml:18: in_progress[4]: names no signal"), "{all}");
        assert!(
            all.contains("p.toml:21: in_progress[5].signal")
                || all.contains("in_progress[5]") && all.contains("unknown field"),
            "{all}"
        );
        assert_eq!(errs.len(), 6, "the good entries give no error: {all}");
        let good = load_str("p.toml", &text[..text.find("[[in_progress]]\nkind = \"Gadget").unwrap()]).unwrap();
        assert_eq!(good.in_progress.len(), 2);
        assert_eq!(
            (good.in_progress[0].conditions.len(), good.in_progress[0].fields.len(), good.in_progress[0].builtin),
            (1, 2, true)
        );
        assert!(!good.in_progress[1].builtin);
    }

    #[test]
    fn in_progress_paused_comparisons_are_checked_and_count_as_a_signal() {
        let text = r#"[[sources]]
type = "webhook"
plain_http = true
[[in_progress]]
kind = "CloneSet.apps.kruise.io"
paused = ["spec.updateStrategy.paused == true"]
[[in_progress]]
kind = "Widget.example.com"
paused = ["suspend == true"]
"#;
        let errs = load_str("p.toml", text).unwrap_err().0;
        let all = errs.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n");
        assert!(all.contains("p.toml:7: in_progress[1].paused: \"suspend == true\""), "{all}");
        assert_eq!(errs.len(), 1, "an entry with paused alone names something: {all}");
        let good = load_str("p.toml", &text[..text.find("[[in_progress]]\nkind = \"Widget").unwrap()]).unwrap();
        assert_eq!(good.in_progress[0].paused, ["spec.updateStrategy.paused == true"]);
    }

    #[test]
    fn policies_are_checked_like_every_other_key_all_errors_at_once() {
        let text = r#"[[sources]]
type = "webhook"
plain_http = true
[[policy]]
name = "heal"
action = "approve"
parent_kinds = ["ReplicaSet.apps"]
[[policy]]
name = "heal"
action = "approve"
[[policy]]
name = "kausality.io/approvals"
action = "reject"
parent_labels = "team in (a)"
[[policy]]
name = "x"
action = "allow"
[[policy]]
name = "y"
action = "reject"
colour = "red"
[[policy]]
name = ""
action = "reject"
child_kinds = ["apps/v1 Pod"]
namespaces = [""]
"#;
        let errs = load_str("p.toml", text).unwrap_err().0;
        let all = errs.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n");
        assert!(all.contains("p.toml:8: policy[1].name: \"heal\" is already the name of policy[0]"), "{all}");
        assert!(
            all.contains("p.toml:11: policy[2].name") && all.contains("kausality.io/ names the parent's annotations"),
            "{all}"
        );
        assert!(all.contains("p.toml:11: policy[2].parent_labels"), "{all}");
        assert!(all.contains("policy[3].action") && all.contains("allow"), "{all}");
        assert!(all.contains("policy[4]") && all.contains("colour"), "{all}");
        assert!(all.contains("p.toml:22: policy[5].name: must not be empty"), "{all}");
        assert!(all.contains("policy[5].child_kinds: \"apps/v1 Pod\" is not a kind key"), "{all}");
        assert!(all.contains("policy[5].namespaces: must not hold an empty string"), "{all}");
        assert_eq!(errs.len(), 8, "{all}");
        let good =
            load_str("p.toml", "[[sources]]\ntype = \"webhook\"\nplain_http = true\n[[policy]]\nname = \"a\"\naction = \"reject\"\nreverts_person = true\n")
                .unwrap();
        assert_eq!((good.policies.len(), good.policies[0].reverts_person), (1, Some(true)));
    }

    #[test]
    fn appliers_are_checked_and_join_the_built_in_profiles() {
        let base = "[[sources]]\ntype = \"webhook\"\nplain_http = true\n";
        let good = format!("{base}[[applier]]\nname = \"bundles\"\nparent_kind = \"Bundle.deploy.example.com\"\nparent_api_version = \"deploy.example.com/v1\"\nname_annotation = \"deploy.example.com/bundle\"\nusers = [\"bundle-controller\"]\n");
        let cfg = load_str("good.toml", &good).unwrap();
        let mut model = crate::config::ModelConfig::default();
        model_appliers(&cfg.appliers, &mut model);
        assert_eq!(model.appliers.profiles.last().map(|p| &*p.name), Some("bundles"));
        assert!(crate::decode::keeps_annotation("deploy.example.com/bundle"), "the decoder keeps its marker");
        let bad = format!("{base}[[applier]]\nname = \"argocd\"\nparent_kind = \"Application.argoproj.io\"\nparent_api_version = \"v1\"\n[[applier]]\nname = \"x\"\nparent_kind = \"X.e.com\"\nparent_api_version = \"e.com/v1\"\nname_label = \"a\"\ncolour = 1\n");
        let all = load_str("bad.toml", &bad).unwrap_err().to_string();
        for want in [
            "applier[0].parent_api_version",
            "applier[0].name_label: is required",
            "applier[0].name: \"argocd\" is taken",
            "applier[0].parent_kind: Application.argoproj.io is a built-in",
            "colour",
        ] {
            assert!(all.contains(want), "{want} in {all}");
        }
    }

    #[test]
    fn policies_load_from_a_pipeline_or_a_file_of_policies_only() {
        let only = "[[policy]]\nname = \"a\"\naction = \"approve\"\nparent_labels = \"team=x\"\n[[policy]]\nname = \"b\"\naction = \"reject\"\nparent_labels = \"team=x\"\n";
        let policies = load_policies_str("only.toml", only).unwrap();
        let mut model = crate::config::ModelConfig::default();
        model_policies(&policies, &mut model).unwrap();
        assert_eq!(
            model.policies.iter().map(|p| (&*p.name, p.parent_selector)).collect::<Vec<_>>(),
            [("a", Some(0)), ("b", Some(0))],
            "one selector, shared"
        );
        assert_eq!(model.policy_selectors.len(), 1);
        let pipeline =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/pipelines/self-healing.toml")).unwrap();
        assert_eq!(load_policies_str("self-healing.toml", &pipeline).unwrap().len(), 1);
        assert_eq!(load_str("self-healing.toml", &pipeline).unwrap().policies[0].name, "native-self-healing");
        let e = load_policies_str("bad.toml", "colour = 1\n[[policy]]\nname = \"a\"\n").unwrap_err().0;
        assert_eq!(e.len(), 2, "{e:?}");
        assert!(e[0].to_string().starts_with("bad.toml:1: colour: unknown key"), "{}", e[0]);
        assert!(e[1].to_string().contains("policy[0]") && e[1].to_string().contains("action"), "{}", e[1]);
        // Past 64 distinct selectors.
        let many: String = (0..65)
            .map(|i| format!("[[policy]]\nname = \"p{i}\"\naction = \"approve\"\nparent_labels = \"k{i}\"\n"))
            .collect();
        let e = load_policies_str("many.toml", &many).unwrap_err().0;
        assert!(e[0].message.contains("more than 64 distinct label selectors"), "{e:?}");
    }

    #[test]
    fn syntax_error_has_a_line() {
        let e = load_str("x.toml", "cluster = \n").unwrap_err().0;
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].line, Some(1));
    }
}

#[cfg(all(test, feature = "kafka"))]
mod changelog_tests {
    use crate::pipeline::load_str;

    fn errors(text: &str) -> Vec<(Option<usize>, String, String)> {
        match load_str("p.toml", text) {
            Ok(_) => Vec::new(),
            Err(e) => e.0.into_iter().map(|e| (e.line, e.key, e.message)).collect(),
        }
    }

    #[test]
    fn a_changelog_needs_a_topic_of_its_own_and_one_input_topic_with_the_line_of_its_table() {
        let base = "[[sources]]\ntype = \"kafka\"\nbrokers = \"k:9092\"\n";
        let ok = format!("{base}topics = [\"audit\"]\n[sources.changelog]\ntopic = \"audit-state\"\n");
        assert!(errors(&ok).is_empty(), "{:?}", errors(&ok));
        let cfg = load_str("p.toml", &ok).unwrap();
        let crate::sources::SourceConfig::Kafka(k) = &cfg.sources[0] else { panic!("a kafka source") };
        assert_eq!(k.changelog_on().map(|c| c.topic.as_str()), Some("audit-state"));

        let two = format!("{base}topics = [\"a\", \"b\"]\n[sources.changelog]\ntopic = \"a\"\n");
        let e = errors(&two);
        assert_eq!(e.len(), 2, "{e:?}");
        assert!(e.iter().all(|(line, _, _)| *line == Some(5)), "the line of [sources.changelog]: {e:?}");
        assert!(
            e.iter().any(|(_, k, m)| k == "sources[0].changelog.topic" && m.contains("not be an input topic")),
            "{e:?}"
        );
        assert!(
            e.iter().any(|(_, k, m)| k == "sources[0].changelog" && m.contains("exactly one input topic")),
            "{e:?}"
        );

        let empty = format!("{base}topics = [\"a\", \"b\"]\n[sources.changelog]\ntopic = \" \"\nenabled = false\n");
        let e = errors(&empty);
        assert_eq!(e.len(), 1, "off: two topics are fine, the empty name is not: {e:?}");
        assert_eq!(e[0].1, "sources[0].changelog.topic");
        let unknown = format!("{base}topics = [\"a\"]\n[sources.changelog]\ntopic = \"s\"\npartitions = 3\n");
        assert!(errors(&unknown).iter().any(|(_, _, m)| m.contains("partitions")), "unknown keys are refused");
        let off = format!("{base}topics = [\"a\"]\n[sources.changelog]\ntopic = \"s\"\nenabled = false\n");
        let cfg = load_str("p.toml", &off).unwrap();
        let crate::sources::SourceConfig::Kafka(k) = &cfg.sources[0] else { panic!("a kafka source") };
        assert!(k.changelog_on().is_none());
    }
}
