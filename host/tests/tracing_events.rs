//! What symmem tells a `tracing` subscriber: the events of a world's formation and of an
//! `Algorithm::Auto` all-reduce, captured with their fields and checked (two ranks as
//! threads, the CPU backend).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use symmem::backend::cpu::Cpu;
use symmem::collectives::{Algorithm, Collectives, ReduceOp};
use symmem::{Config, World};
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt};

/// One event: its level, and every field (the message as `message`) as text.
#[derive(Debug, Clone)]
struct Event {
    level: tracing::Level,
    fields: BTreeMap<String, String>,
}

impl Event {
    fn get(&self, name: &str) -> &str {
        self.fields.get(name).map_or("", String::as_str)
    }
}

/// A layer that keeps every event.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<Event>>>);

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Capture {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        let mut fields = BTreeMap::new();
        event.record(&mut Fields(&mut fields));
        let level = *event.metadata().level();
        self.0.lock().unwrap().push(Event { level, fields });
    }
}

fn each_rank(world: World<Cpu>) -> symmem::Result<()> {
    let collectives = Collectives::new(&world)?;
    // 64 f32 (256 bytes): `Auto` runs the barrier-free kernel; 1 Mi f32 (4 MiB): one-shot
    // or two-shot by size, never barrier-free.
    for count in [64, 1 << 20] {
        let src = world.from_slice(&vec![1.0f32; count])?;
        let dst = world.zeros::<f32>(count)?;
        world.barrier()?;
        collectives.all_reduce(&dst, &src, count, ReduceOp::Sum, Algorithm::Auto)?;
        assert!(world.read(&dst)?.iter().all(|&v| v == 2.0));
    }
    Ok(())
}

#[test]
fn a_worlds_formation_and_an_auto_all_reduce_are_traced_with_their_fields() {
    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");
    let config = Config {
        heap_bytes: 32 << 20,
        ..Config::default()
    };
    for result in symmem::spawn_ranks(2, &config, |_| Ok(Cpu::new()), each_rank).unwrap() {
        result.unwrap();
    }
    let events = capture.0.lock().unwrap().clone();
    let named = |message: &str| -> Vec<&Event> {
        events
            .iter()
            .filter(|e| e.get("message") == message)
            .collect()
    };

    let formed = named("symmem world formed");
    assert_eq!(formed.len(), 2, "{events:#?}");
    let mut ranks: Vec<&str> = formed.iter().map(|e| e.get("rank")).collect();
    ranks.sort();
    assert_eq!(ranks, ["0", "1"]);
    for e in formed {
        assert_eq!(e.level, tracing::Level::INFO);
        assert_eq!(e.get("world_size"), "2");
        assert_eq!(e.get("backend"), "cpu");
        assert!(e.get("device").starts_with("host CPU"), "{e:?}");
        assert_eq!(e.get("arch"), "host");
        assert_eq!(e.get("nodes"), "1");
        assert_eq!(e.get("ranks_on_node"), "2");
        assert_eq!(e.get("engine"), "None");
        assert_eq!(e.get("heap_bytes"), (32 << 20).to_string());
    }

    let reduces = named("all_reduce");
    assert_eq!(reduces.len(), 4, "{events:#?}");
    for e in &reduces {
        assert_eq!(e.level, tracing::Level::DEBUG);
        assert_eq!(e.get("asked"), "Auto");
        assert_eq!(e.get("op"), "Sum");
        assert_eq!(e.get("world_size"), "2");
    }
    let chose = |bytes: usize| -> Vec<&str> {
        reduces
            .iter()
            .filter(|e| e.get("bytes") == bytes.to_string())
            .map(|e| e.get("algorithm"))
            .collect()
    };
    assert_eq!(chose(256), ["lamport", "lamport"]);
    let large = chose(4 << 20);
    assert_eq!(large.len(), 2);
    assert!(
        large.iter().all(|a| *a == "one-shot" || *a == "two-shot"),
        "{large:?}"
    );

    // Every allocation (two buffers per size on each rank, besides the collectives'
    // own) and agreement is there too.
    let allocations = named("symmetric allocation");
    for bytes in [256, 4 << 20] {
        let n = allocations
            .iter()
            .filter(|e| e.get("bytes") == bytes.to_string())
            .count();
        assert_eq!(n, 4, "{bytes}-byte allocations: {allocations:#?}");
    }
    assert!(!named("agreement").is_empty());
}
