// Choosing the dataset of a file that holds several (an HDF5 file, a .npz) when the user named
// none, for the images and for their labels. Internal header.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dctchop/formats/dataset_io.hpp"

namespace dctchop::formats::detail {

/** One array of a file, as the choice sees it. */
struct candidate {
  std::string path;  ///< "/train/images" (HDF5), "x_train" (.npz)
  std::vector<std::uint64_t> shape;
  bool numeric = false;  ///< its elements read as numbers (integers, floats, bool, enums of integers)
  /** "bool" or "enum" for a type of labels, never taken for the images (NumPy's bool, an HDF5
   *  enum such as h5py's bool or a segmentation's classes); "" otherwise. */
  std::string labels_type;
  std::string refused;  ///< why it cannot be read, when it cannot (listed instead of a shape)
};

/** "path (shape), path (shape)", for messages. */
std::string listing(const std::vector<candidate>& arrays);

/** How the choice words its messages for one file format. */
struct choice_words {
  std::string what;        ///< "dataset", "array"
  std::string name_data;   ///< how to name the images: "FILE.h5:/path or --dataset"
  std::string name_labels; ///< and the labels: "--labels FILE.h5:/path"
};

/** The array that `file`'s `all` arrays offer for `spec.purpose` when none was named: the only
 *  one that fits (data: numeric but not bool or enum, 2 or more axes; labels: numeric, 1 or more axes; never
 *  `spec.not_this`; `spec.rows` rows when set), else the one fitting array with a
 *  conventional name (data: images, data, x; labels: labels, label, y, targets; the last path
 *  component counts), else (labels) the one fitting array of 1 or 2 axes. No fitting array is
 *  error(bad_input); several and no way to choose, error(invalid_argument) listing them.
 *  `note` gets "using dataset /images of train.h5" (after "; " where it holds a note already). */
std::string choose_array(const std::string& file, const std::vector<candidate>& all,
                         const dataset_spec& spec, const choice_words& words, std::string& note);

}  // namespace dctchop::formats::detail
