//! The kernel contract from safe code, as an application meets it (issue 53): the README's
//! kernel (a safe `fn` over a symmetric view, the peer-put example's `add_to_peer`)
//! launched with `n` past its buffer's end, and with ranks it cannot reach, writes nothing
//! outside its buffer; and the one table a kernel parameter carries says what symmem
//! uploaded (its length, its rank, its entries; nothing for a rank out of range). Ranks
//! as threads on the CPU backend. (An `unsafe fn` kernel launched from safe code does not
//! compile: `symmem::launch`'s `compile_fail` doctests.)

use symmem::backend::cpu::Cpu;
use symmem::{Config, Grid, World};

fn run(n: usize, body: impl Fn(World<Cpu>) -> symmem::Result<()> + Sync) {
    let results = symmem::spawn_ranks(n, &Config::default(), |_| Ok(Cpu::new()), body)
        .expect("spawning the ranks");
    for (rank, result) in results.into_iter().enumerate() {
        result.unwrap_or_else(|e| panic!("rank {rank}: {e}"));
    }
}

/// What the issue measured with the `unsafe fn` form: `n = 256` over a 64-element buffer
/// changed all 64 elements of the buffer allocated right after it, on both ranks. Now the
/// view stops at its end: the next buffer is untouched.
#[test]
fn the_readme_kernel_past_its_buffer_writes_nothing_outside_it() {
    run(2, |world| {
        let rank = world.rank();
        let module = world.load(symmem_tests::objects::of("peer_put_kernels"))?;
        let data = world.zeros::<u32>(64)?;
        let after = world.zeros::<u32>(64)?;
        world.barrier()?;
        let to = (1 - rank) as u32;
        // `n` four times the buffer's length; then ranks outside the world.
        module.launch(
            peer_put_kernels::add_to_peer,
            Grid::new(1, 256),
            (&data, to, 256u32, 5u32),
        )?;
        for nowhere in [2u32, 99, u32::MAX] {
            module.launch(
                peer_put_kernels::add_to_peer,
                Grid::new(1, 256),
                (&data, nowhere, 256u32, 1u32),
            )?;
        }
        world.barrier()?;
        assert_eq!(world.read(&data)?, vec![5; 64], "rank {rank}: its buffer");
        assert_eq!(
            world.read(&after)?,
            vec![0; 64],
            "rank {rank}: the next one"
        );
        world.barrier()
    });
}

/// A kernel reads a table's length and rank from the table itself, and a rank out of
/// range gives no entry: every table symmem uploads (the heap's, a buffer's, a
/// registration's) has its header.
#[test]
fn every_table_carries_its_length_and_rank() {
    run(3, |world| {
        let (rank, n) = (world.rank(), world.world_size());
        let (buffer, table) = world.allocate_symmetric::<u32>(16)?;
        let registered = world.register(world.device_zeros::<u32>(16)?)?;
        world.barrier()?;
        let out = world.device_zeros::<u64>(3)?;
        for table in [world.heap_bases(), &table, registered.peer_bases()] {
            for at in [0, n - 1, n, 1000] {
                world.kernels().launch(
                    symmem_kernels::symmem_table_probe,
                    Grid::new(1, 1),
                    (table, at as u32, &out),
                )?;
                let want = table.entries().get(at).copied().unwrap_or(0);
                assert_eq!(world.read(&out)?, [n as u64, rank as u64, want]);
            }
        }
        drop((buffer, registered));
        world.barrier()
    });
}
