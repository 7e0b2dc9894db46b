//! Ranks as processes: each child's results as one line ([`Record`]) the parent reads
//! back.

use super::*;

/// One line a child of a processes program prints for its parent, after [`RECORD`]: the
/// payload's length in bytes, a space, the payload (words, the last field of a failure or
/// a panic its free text). A line that a kill cut short never reads as a record.
#[derive(Debug, PartialEq)]
pub(crate) enum Record {
    /// What `run_rank` recorded at a step.
    Seen(usize, Seen),
    /// What `World::finalize` said.
    Finalized(Plain<()>),
    /// A panic other than the injected one.
    Panicked(String),
}

/// `text` on one line (a record is a line).
fn one_line(text: &str) -> String {
    text.replace('\n', "\\n")
}

/// A failure's words: its kind, the rank it names (`-` for none), the ranks it names
/// (joined by commas, `-` for none), then its text to the end.
fn encode_failure(f: &Failure) -> String {
    let rank = f.rank.map_or("-".into(), |r| r.to_string());
    let ranks = if f.ranks.is_empty() {
        "-".into()
    } else {
        let ranks: Vec<String> = f.ranks.iter().map(usize::to_string).collect();
        ranks.join(",")
    };
    format!("{} {rank} {ranks} {}", f.kind, one_line(&f.text))
}

/// `ok` and what `ok` makes of the value (if anything), or `err` and the failure.
fn encode_result<T>(result: &Plain<T>, ok: impl FnOnce(&T) -> String) -> String {
    match result {
        Ok(v) => match ok(v) {
            v if v.is_empty() => "ok".into(),
            v => format!("ok {v}"),
        },
        Err(f) => format!("err {}", encode_failure(f)),
    }
}

/// The number of reads, then each read: its values joined by commas, `_` if none.
fn encode_readouts(readouts: &Readouts) -> String {
    let mut out = readouts.len().to_string();
    for read in readouts {
        out.push(' ');
        if read.is_empty() {
            out.push('_');
        } else {
            let vals: Vec<String> = read.iter().map(i64::to_string).collect();
            out += &vals.join(",");
        }
    }
    out
}

/// A cursor over a record's words (what is left of it).
struct Words<'a>(&'a str);

impl<'a> Words<'a> {
    /// The next word, or why there is none.
    fn word(&mut self) -> Result<&'a str, String> {
        let (word, rest) = self.0.split_once(' ').unwrap_or((self.0, ""));
        if word.is_empty() {
            return Err("a word is missing".into());
        }
        self.0 = rest;
        Ok(word)
    }

    /// The next word as a number, or why it is none.
    fn number<T: std::str::FromStr>(&mut self) -> Result<T, String> {
        let word = self.word()?;
        word.parse()
            .map_err(|_| format!("{word:?} is not a number"))
    }

    /// Nothing is left.
    fn end(self) -> Result<(), String> {
        match self.0 {
            "" => Ok(()),
            rest => Err(format!("{rest:?} is left over")),
        }
    }
}

/// The failure [`encode_failure`] wrote (the rest of the record), or why it is none.
fn decode_failure(mut w: Words<'_>) -> Result<Failure, String> {
    let kind = w.word()?.to_owned();
    let rank = match w.word()? {
        "-" => None,
        rank => Some(
            rank.parse()
                .map_err(|_| format!("{rank:?} is not a rank"))?,
        ),
    };
    let ranks = match w.word()? {
        "-" => Vec::new(),
        ranks => ranks
            .split(',')
            .map(|r| r.parse().map_err(|_| format!("{r:?} is not a rank")))
            .collect::<Result<_, _>>()?,
    };
    Ok(Failure {
        kind,
        rank,
        ranks,
        text: w.0.to_owned(),
    })
}

/// The result [`encode_result`] wrote (the rest of the record; `ok` reads the value), or
/// why it is none.
fn decode_result<'a, T>(
    mut w: Words<'a>,
    ok: impl FnOnce(Words<'a>) -> Result<T, String>,
) -> Result<Plain<T>, String> {
    match w.word()? {
        "ok" => Ok(Ok(ok(w)?)),
        "err" => Ok(Err(decode_failure(w)?)),
        other => Err(format!("{other:?} is neither ok nor err")),
    }
}

/// The readouts [`encode_readouts`] wrote (the rest of the record), or why they are none.
fn decode_readouts(mut w: Words<'_>) -> Result<Readouts, String> {
    let reads: usize = w.number()?;
    let readouts = (0..reads)
        .map(|_| match w.word()? {
            "_" => Ok(Vec::new()),
            read => read
                .split(',')
                .map(|v| v.parse().map_err(|_| format!("{v:?} is not a value")))
                .collect(),
        })
        .collect::<Result<_, String>>()?;
    w.end()?;
    Ok(readouts)
}

impl Record {
    /// The record's line, [`RECORD`] first.
    pub(crate) fn encode(&self) -> String {
        let payload = match self {
            Record::Seen(
                step,
                Seen::Done {
                    result,
                    took,
                    ended,
                },
            ) => format!(
                "seen {step} done {} {ended} {}",
                took.as_nanos(),
                encode_result(result, encode_readouts)
            ),
            Record::Seen(step, Seen::Injected { kind, at, result }) => format!(
                "seen {step} injected {} {at} {}",
                kind.name(),
                result
                    .as_ref()
                    .map_or("none".into(), |r| encode_result(r, |()| String::new()))
            ),
            Record::Finalized(result) => {
                format!("finalized {}", encode_result(result, |()| String::new()))
            }
            Record::Panicked(text) => format!("panicked {}", one_line(text)),
        };
        format!("{RECORD}{} {payload}", payload.len())
    }

    /// The record of a line's text after [`RECORD`], or why it is none.
    pub(crate) fn decode(framed: &str) -> Result<Self, String> {
        let (len, payload) = framed.split_once(' ').ok_or("no length")?;
        let len: usize = len
            .parse()
            .map_err(|_| format!("{len:?} is not a length"))?;
        if payload.len() != len {
            return Err(format!("{} bytes of {len}", payload.len()));
        }
        let mut w = Words(payload);
        Ok(match w.word()? {
            "seen" => {
                let step = w.number()?;
                let seen = match w.word()? {
                    "done" => Seen::Done {
                        took: Duration::from_nanos(w.number()?),
                        ended: w.number()?,
                        result: decode_result(w, decode_readouts)?,
                    },
                    "injected" => {
                        let name = w.word()?;
                        let kind = FaultKind::named(name)
                            .ok_or_else(|| format!("{name:?} is no fault"))?;
                        let at = w.number()?;
                        let result = match w.0 {
                            "none" => None,
                            _ => Some(decode_result(w, Words::end)?),
                        };
                        Seen::Injected { kind, at, result }
                    }
                    other => return Err(format!("{other:?} is no result")),
                };
                Record::Seen(step, seen)
            }
            "finalized" => Record::Finalized(decode_result(w, Words::end)?),
            "panicked" => Record::Panicked(w.0.to_owned()),
            other => return Err(format!("{other:?} is no record")),
        })
    }
}

/// Runs `p` with its ranks as processes: children of this test binary (each in
/// [`run_child`]), the kill's victim SIGKILLed on its marker, every child reaped, those
/// left at [`PROGRAM_BOUND`] killed; their records read back.
pub(crate) fn execute_processes(p: &Program) -> Observed {
    let n = p.world;
    let kill = p
        .fault
        .filter(|f| f.kind == FaultKind::Kill)
        .map(|f| (f.rank, KILL_MARKER));
    let children = processes::spawn_ranks(
        CHILD_TEST,
        &format!("soak {}", p.seed),
        n,
        TIMEOUT,
        PROGRAM_BOUND,
        kill,
    );
    let mut steps: Vec<Vec<(usize, Seen)>> = (0..n).map(|_| Vec::new()).collect();
    let mut finalized = vec![None; n];
    let mut panics = vec![None; n];
    let mut unreadable = Vec::new();
    for (rank, child) in children.iter().enumerate() {
        let records: Vec<&str> = child
            .lines
            .iter()
            .filter_map(|line| line.split_once(RECORD).map(|(_, framed)| framed))
            .collect();
        for (i, framed) in records.iter().enumerate() {
            match Record::decode(framed) {
                Ok(Record::Seen(step, seen)) => steps[rank].push((step, seen)),
                Ok(Record::Finalized(result)) => finalized[rank] = Some(result),
                Ok(Record::Panicked(text)) => panics[rank] = Some(text),
                // The kill may cut the victim's last line short.
                Err(_) if child.killed.is_some() && i + 1 == records.len() => {}
                Err(why) => {
                    let start: String = framed.chars().take(200).collect();
                    unreadable.push((rank, format!("{why}: {start}")));
                }
            }
        }
    }
    Observed {
        steps,
        finalized,
        panics,
        ended: Ended::Processes {
            children,
            unreadable,
        },
    }
}

/// What a child process of this file does, by its mode: `soak SEED` ([`run_program`]),
/// or a regression's part (`hub-panics`: [`hub_panics_child`]).
pub(crate) fn run_child(mode: &str) -> ! {
    quiet_injected_panics();
    if mode == "hub-panics" {
        hub_panics_child();
    }
    let seed = mode
        .strip_prefix("soak ")
        .and_then(|seed| seed.parse().ok())
        .unwrap_or_else(|| panic!("bad child mode {mode:?}"));
    run_program(seed)
}

/// A rank of the processes program of seed `seed`: regenerates the program, joins its
/// world, runs its rank printing every record, finalizes (unless it left), and exits: 0
/// where it ran to its end or left, [`EXIT_ERROR`] where it ended with an error,
/// [`EXIT_INJECTED_PANIC`] or [`EXIT_PANIC`] where it panicked (its world dropped while
/// unwinding, as a thread rank's is), and as `exit_child` says where its world did not
/// form.
fn run_program(seed: u64) -> ! {
    let p = generate(seed, Launcher::Processes);
    let joined = UnixBootstrap::from_env()
        .and_then(|bootstrap| World::new(Box::new(bootstrap), Cpu::new(), &config_of(&p)));
    let world = match joined {
        Ok(world) => world,
        Err(e) => processes::exit_child(&Err(e)),
    };
    let emit = |record: Record| println!("{}", record.encode());
    let ran = std::panic::catch_unwind(AssertUnwindSafe(move || {
        let ending = run_rank(&p, &world, &|_, step, seen| emit(Record::Seen(step, seen)));
        (ending, world)
    }));
    let code = match ran {
        Ok((Ending::Left, world)) => {
            drop(world);
            0
        }
        Ok((ending, world)) => {
            let finalized = plain(world.finalize());
            let failed = ending == Ending::Stopped || finalized.is_err();
            emit(Record::Finalized(finalized));
            if failed { EXIT_ERROR } else { 0 }
        }
        Err(payload) => match panic_text(&*payload) {
            text if text == INJECTED => EXIT_INJECTED_PANIC,
            text => {
                emit(Record::Panicked(text));
                EXIT_PANIC
            }
        },
    };
    std::io::stdout().flush().expect("stdout");
    std::process::exit(code)
}
