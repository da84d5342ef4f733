//! Generates the wire types. protoc comes from `protoc-bin-vendored`, never from
//! the host, so a fresh machine needs nothing from apt.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // SAFETY: a build script is single-threaded here; prost-build reads PROTOC
    // from our own environment after this point.
    unsafe {
        std::env::set_var("PROTOC", protoc);
    }
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    tonic_prost_build::configure()
        .file_descriptor_set_path(out.join("tollgate_descriptor.bin"))
        .compile_protos(&["tollgate.proto"], &["."])?;
    println!("cargo:rerun-if-changed=tollgate.proto");
    Ok(())
}
