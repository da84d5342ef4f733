//! Generates the wire types. The .proto is compiled by `protox`, in Rust, so
//! neither the host nor a vendored binary supplies protoc.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    use prost::Message as _;
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    let fds = protox::compile(["tollgate.proto"], ["."])?;
    std::fs::write(out.join("tollgate_descriptor.bin"), fds.encode_to_vec())?;
    tonic_prost_build::configure().compile_fds(fds)?;
    println!("cargo:rerun-if-changed=tollgate.proto");
    Ok(())
}
