//! Two ranks as threads of this process, on the CPU backend (on GPUs: `Cuda::for_rank`).
use symmem::{Config, Result, World, backend::cpu::Cpu};

fn each_rank(world: World<Cpu>) -> Result<Vec<u32>> {
    let (rank, next) = (world.rank(), (world.rank() + 1) % world.world_size());
    let data = world.zeros::<u32>(4)?; // symmetric: a copy on every rank
    let mine = world.device_from_slice(&[rank as u32 + 1; 4])?; // on this rank only
    world.barrier()?; // every rank has allocated
    world.put(&data, &mine, next)?; // into the next rank's copy of `data`
    world.barrier()?; // every put has landed
    world.read(&data)
}

fn main() -> Result<()> {
    let results = symmem::spawn_ranks(2, &Config::default(), |_| Ok(Cpu::new()), each_rank)?;
    assert_eq!(results[0].as_ref().unwrap(), &[2; 4]); // rank 1 wrote into rank 0's copy
    Ok(())
}
