//! SCSI
